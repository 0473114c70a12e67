"""What the tests of data jobs in the database share (issue 35): a data job run by hand, its
tasks leased and acked as a worker would and its record written as its tasks write it (no
Spark), for the mirror's copy (core.mirror.datajobs) and the pages that read it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from core.pipeline import jobs
from core.pipeline.check import make_spec
from core.pipeline.spec import JobSpec
from core.queue import Queue

EXPLAIN = "== Physical Plan ==\n* HashAggregate (3)\n+- Exchange (2)\n   +- BatchScan slices (1)"


def submitted(q: Queue, tmp_path: Path, job_id: str = "dj1") -> JobSpec:
    data = tmp_path / "in.parquet"
    if not data.exists():
        pd.DataFrame({"carrier": ["AA", "UA"], "n": [1, 2]}).to_parquet(data, index=False)
    spec = make_spec(job_id=job_id, input=str(data), format="parquet",
                     output=str(tmp_path / f"out-{job_id}"),
                     sql="SELECT carrier, count(*) AS n FROM chunk GROUP BY carrier",
                     combine_sql="SELECT carrier, sum(n) AS n FROM parts GROUP BY carrier",
                     chunks=2)
    assert jobs.submit(q, spec)
    return spec


def split(q: Queue, spec: JobSpec, n: int = 2) -> None:
    """As the split task does: record the plan and the EXPLAIN texts, add n chunk tasks."""
    [task] = q.dequeue("w-one", count=1)
    reads = [{"groups": [[spec.input, k, k + 1]], "known_rows": 1} for k in range(n)]
    jobs.records(q).put(spec.job_id, {
        "chunks": n, "rows": n, "split": "row groups", "split_seconds": 0.125,
        "plan": json.dumps({"reads": reads, "how": "row groups", "rows": n}),
        "explain_sql": EXPLAIN, "explain_combine": "== Physical Plan ==\nHashAggregate"})
    q.add(spec.job_id, [{"op": "chunk", "job": spec.job_id, "chunk": k, "read": reads[k]}
                        for k in range(n)])
    q.seal(spec.job_id)
    q.ack(task)


def report(k: int, **change: Any) -> str:
    return json.dumps({"chunk": k, "rows_in": 1, "rows_out": 1, "seconds": 0.5 + k,
                       "attempt": 1, "worker": "w-one", "part_written_by": "worker",
                       "input_bytes": 1000 + k, "shuffle_read_bytes": 60,
                       "shuffle_write_bytes": 61, **change})


def run_chunks(q: Queue, spec: JobSpec, *, fail: int | None = None) -> None:
    """Lease every chunk task; report and ack each, or fail chunk `fail` for good."""
    for lease in q.dequeue("w-one", count=100):
        k = lease.payload["chunk"]
        if k == fail:
            q.fail(lease, f"DataJobError: chunk {k} of job {spec.job_id}: bad row 'x' in 7",
                   retry=False)
            continue
        jobs.records(q).put(spec.job_id, {f"chunk:{k}": report(k)})
        q.ack(lease)


def combine(q: Queue, spec: JobSpec) -> dict[str, Any]:
    [task] = q.dequeue("w-one", count=1)
    manifest = {"job": spec.job_id, "rows_in": 2, "rows_out": 2, "chunk_seconds": 2.0,
                "combine_seconds": 0.25, "chunks": [json.loads(report(k)) for k in range(2)]}
    jobs.records(q).put(spec.job_id, {"manifest": json.dumps(manifest)})
    q.ack(task)
    return manifest

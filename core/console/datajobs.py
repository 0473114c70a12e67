"""What the Data jobs page shows of a job, read without Spark: its status from Redis (the
pipeline's own record), and the first rows of a complete output read with pyarrow."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.pipeline import jobs
from core.pipeline.spec import SUCCESS, JobSpec
from core.queue import Queue

PREVIEW_ROWS = 20


@dataclass(frozen=True)
class Chunk:
    index: int
    state: str  # done, or pending (not reported yet)
    rows_in: int | None = None
    rows_out: int | None = None
    seconds: float | None = None
    attempt: int | None = None
    worker: str = ""


@dataclass(frozen=True)
class Preview:
    columns: list[str]
    rows: list[list[str]]
    error: str = ""


def chunks_of(st: jobs.JobStatus) -> list[Chunk]:
    """One row per chunk once the split has counted them; reported chunks with their figures."""
    n = st.chunks if st.chunks is not None else len(st.reports)
    out = []
    for k in range(n):
        r = st.reports.get(k)
        out.append(Chunk(k, "pending") if r is None else Chunk(
            k, "done", r.rows_in, r.rows_out, r.seconds, r.attempt, r.worker))
    return out


def preview(spec: JobSpec | None, *, rows: int = PREVIEW_ROWS) -> Preview | None:
    """The first rows of a complete output (with _SUCCESS), as text; None before that."""
    if spec is None or not (Path(spec.output) / SUCCESS).exists():
        return None
    try:
        if spec.output_format == "csv":
            return _preview_csv(Path(spec.output), rows)
        return _preview_parquet(Path(spec.output), rows)
    except (OSError, ValueError) as exc:  # pyarrow's errors are ValueErrors (ArrowInvalid)
        return Preview([], [], f"cannot read {spec.output}: {exc}")


def _preview_parquet(out: Path, rows: int) -> Preview:
    import pyarrow.parquet as pq

    files = sorted(p for p in out.glob("*.parquet") if not p.name.startswith((".", "_")))
    if not files:
        files = sorted(p for p in out.iterdir() if p.name.startswith("part-"))
    columns: list[str] = []
    got: list[list[str]] = []
    for f in files:
        pf = pq.ParquetFile(f)
        columns = columns or list(pf.schema_arrow.names)
        for batch in pf.iter_batches(batch_size=rows):
            got += [[_text(v) for v in row.values()] for row in batch.to_pylist()]
            break
        if len(got) >= rows:
            break
    return Preview(columns, got[:rows])


def _preview_csv(out: Path, rows: int) -> Preview:
    import csv

    files = sorted(out.glob("part-*.csv"))
    if not files:
        return Preview([], [])
    with open(files[0], newline="") as fh:
        reader = csv.reader(fh)
        columns = next(reader, [])
        got = [row for _, row in zip(range(rows), reader, strict=False)]
    return Preview(columns, got)


def _text(v: Any) -> str:
    return "" if v is None else str(v)


def manifest_text(st: jobs.JobStatus) -> str:
    return json.dumps(st.manifest, indent=2, sort_keys=False) if st.manifest else ""


def status(q: Queue, job_id: str) -> jobs.JobStatus:
    return jobs.status(q, job_id)

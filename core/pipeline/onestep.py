"""A small data job in one step: when the split plans one chunk, the split task itself runs
the chunk's SQL and the combine SQL over it as one Spark query, and writes the output, its
manifest and `_SUCCESS` as the combine step would; no chunk task, no part written and read
back, no combine over the parts (its step, queued behind, then finds the output done and only
cleans up).

When: the plan has one chunk (by default, an input of less than plan.MIN_SHARED_BYTES, 48 MiB
of the columns the job reads, is one chunk: below that, sharing it between slots costs more in
Spark's fixed costs than it saves, and one chunk then gains nothing from a step of its own),
the job has combine SQL, and it is not incremental (whose chunks' parts are kept for the next
run). The README job (336,776 rows, 5 MB) went from a split, a chunk and a combine, each a task
and one or more Spark jobs, to one task and one Spark job.

The manifest is the split path's: one chunk whose report has the rows in (the footers'), the
rows its SQL gave (counted by an observation inside the same query) and its seconds, plus
`one_step: true`.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from typing import Any

from core.worker.context import TaskContext

from . import check, combine, io, jobs, spark_query, spark_sessions, step
from .progress import Meter
from .spec import JobSpec

log = logging.getLogger("queueadmin.pipeline")


def eligible(spec: JobSpec, reads: list[dict[str, Any]]) -> bool:
    """Whether a job whose split planned `reads` runs in one step."""
    return len(reads) == 1 and spec.combine_sql is not None and not spec.incremental


def run(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext,
        statements: check.Statements, files: list[str], base: str | None,
        known_rows: int | None) -> dict[str, Any]:
    """The whole job over `files` (the input's listing; `base`: its partition folders' root),
    in this task: chunk SQL, combine SQL, output, manifest. Returns the manifest."""
    from pyspark.sql import functions as F

    assert statements.combine_sql is not None
    started, started_ms = time.monotonic(), int(time.time() * 1000)
    q = ctx.queue
    staged_out = spec.staging / "out"
    shutil.rmtree(staged_out, ignore_errors=True)
    staged_out.parent.mkdir(parents=True, exist_ok=True)
    meter = Meter()
    with step.sparking(spec, payload, ctx, meter) as session:
        spark_query.file_partitions(session, None)
        views = io.view_frames(session, spec)
        frame = io.read_input(session, spec, files, base=base)
        result, counted = spark_query.observed(
            step.transform(session, spec, frame, statements, views), "one_step_chunk_rows",
            F.count(F.lit(1)).alias("rows"))
        spark_at = time.monotonic()
        rows_out, output_by = combine.write_combined(session, spec, statements, result,
                                                     staged_out, tiny=not spec.views)
        spark_s = time.monotonic() - spark_at
        chunk_rows = int(counted.get["rows"])
        version, master = spark_sessions.identity(session)
    seconds = round(time.monotonic() - started, 3)
    report = {"chunk": 0, "rows_in": known_rows, "rows_out": chunk_rows, "seconds": seconds,
              "attempt": ctx.attempt, "worker": ctx.worker, "part_written_by": "one step",
              **meter.figures(), "started_ms": started_ms,
              "queued_ms": 0, "spark_s": round(spark_s, 3)}  # right after the split's plan
    rec = jobs.records(q)
    rec.put(spec.job_id, {"chunk:0": json.dumps(report)})
    manifest = combine.finish_output(spec, q, rec.all(spec.job_id), {0: report}, rows_out,
                                     output_by, {"combine_seconds": 0.0, "one_step": True,
                                                 "spark_version": version, "master": master})
    log.info("one step job=%s rows_in=%s rows_out=%d in %.2fs", spec.job_id,
             "?" if known_rows is None else known_rows, rows_out, seconds)
    return manifest

"""A data job's tasks report their Spark progress (core.pipeline.progress) through
ctx.progress(): Spark tasks finished of those known, over the task's Spark jobs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from core.pipeline import jobs
from core.queue import Queue, read
from tests.pipeline_support import run_job, spec_for

pytestmark = pytest.mark.slow


def test_each_chunk_and_the_combine_end_on_all_their_spark_tasks_done(
    dq: Queue, connect_url: str, flights_parquet: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    path, _ = flights_parquet
    spec = spec_for(tmp_path, path, sql="SELECT carrier, distance FROM chunk", chunks=2,
                    combine_sql="SELECT carrier, sum(distance) AS d FROM parts GROUP BY carrier")
    st = run_job(dq, spec, concurrency=2)
    assert st.state == "done", st.failures
    for rid in (spec.job_id, jobs.combine_id(spec.job_id)):
        reported = read.progress(dq, rid)
        assert reported, f"no Spark progress from the tasks of {rid}"
        for p in reported:
            assert p.total and p.done == p.total, p
            # Spark's own counts; or, for an operation shorter than Spark's report interval
            # that ended with none of its stages reported, the task's word that it is done.
            assert (p.message.startswith(f"Spark: {p.done:,} of {p.total:,} tasks")
                    or p.message.startswith("Spark: done (too quick")), p.message
    chunks = {p.task_id for p in read.progress(dq, spec.job_id)}
    assert len(chunks) >= 2  # both chunks (the split may report too)

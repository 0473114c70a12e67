"""What a data job's record holds for its page and the database (issue 35): Spark's EXPLAIN of
the chunk SQL over the first chunk's read and of the combine SQL, captured at the split by
planning calls that start no Spark job; how long the split planned; each chunk's input and
shuffle bytes where Spark reports them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from core.pipeline import jobs, spark_query
from core.queue import Queue
from tests.pipeline_support import flights, run_job, spec_for

pytestmark = pytest.mark.slow

AGG_SQL = "SELECT carrier, month, count(*) AS n, sum(distance) AS d FROM chunk GROUP BY 1, 2"
COMBINE_SQL = "SELECT carrier, sum(n) AS n, sum(d) AS d FROM parts GROUP BY carrier"


def partitioned(tmp_path: Path, df: pd.DataFrame) -> Path:
    """The rows by carrier, one folder each: whole files read by Spark's own file reader."""
    d = tmp_path / "by_carrier"
    for carrier, rows in df.groupby("carrier"):
        (d / f"carrier={carrier}").mkdir(parents=True)
        rows.drop(columns="carrier").to_parquet(d / f"carrier={carrier}" / "part-0.parquet",
                                                index=False)
    return d


def test_the_split_records_explain_of_both_statements_and_its_time(
    dq: Queue, connect_url: str, tmp_path: Path
) -> None:
    data = partitioned(tmp_path, flights(600))
    spec = spec_for(tmp_path, data, sql=AGG_SQL, combine_sql=COMBINE_SQL, chunks=2)
    st = run_job(dq, spec)
    assert st.state == "done", st.failures
    rec = jobs.records(dq).all(spec.job_id)
    # The chunk's plan over chunk 0's read: Spark's file scan of its files, the aggregate.
    chunk_plan = rec["explain_sql"]
    assert "Physical Plan" in chunk_plan and "HashAggregate" in chunk_plan, chunk_plan
    assert "Scan parquet" in chunk_plan and "carrier=" in chunk_plan, chunk_plan
    combine_plan = rec["explain_combine"]
    assert "HashAggregate" in combine_plan and "sum(n" in combine_plan, combine_plan
    assert 0 < float(rec["split_seconds"]) < 120


def test_each_chunk_reports_the_shuffle_and_input_bytes_spark_sent_with_its_result(
    dq: Queue, connect_url: str, tmp_path: Path
) -> None:
    """An aggregating chunk whose result comes back over Arrow: Spark Connect sends the
    query's SQL metrics with it (its Exchange's shuffle bytes, its scan's files' bytes)."""
    data = partitioned(tmp_path, flights(600))
    spec = spec_for(tmp_path, data, sql=AGG_SQL, combine_sql=COMBINE_SQL, chunks=2)
    st = run_job(dq, spec)
    assert st.state == "done", st.failures
    assert len(st.reports) == 2
    for r in st.reports.values():
        assert r.part_written_by == "worker"
        assert r.shuffle_write_bytes and r.shuffle_write_bytes > 0, r
        assert r.shuffle_read_bytes and r.shuffle_read_bytes > 0, r
        assert r.input_bytes and r.input_bytes > 0, r
    # The manifest carries the same reports.
    assert st.manifest is not None
    assert [c["shuffle_write_bytes"] for c in st.manifest["chunks"]] == [
        st.reports[k].shuffle_write_bytes for k in range(2)]


def test_a_part_spark_writes_reports_no_shuffle_it_was_not_told(
    dq: Queue, connect_url: str, tmp_path: Path
) -> None:
    """A part Spark writes itself: Spark Connect sends no SQL metrics for a write, so its
    shuffle bytes are unknown (None), never a made-up 0."""
    data = partitioned(tmp_path, flights(300))
    spec = spec_for(tmp_path, data, sql="SELECT month, distance FROM chunk", chunks=2)
    st = run_job(dq, spec)
    assert st.state == "done", st.failures
    for r in st.reports.values():
        assert r.part_written_by == "spark"
        assert r.shuffle_read_bytes is None and r.shuffle_write_bytes is None
    raw = json.loads(jobs.records(dq).get(spec.job_id, "chunk:0") or "{}")
    assert "input_bytes" in raw  # said, even when Spark did not report it (null)


def test_a_combine_statement_spark_refuses_still_fails_the_split_once(
    dq: Queue, connect_url: str, tmp_path: Path
) -> None:
    """Its analysis is now its EXPLAIN's: the same refusal, at the split, once."""
    data = partitioned(tmp_path, flights(60))
    spec = spec_for(tmp_path, data, sql="SELECT month FROM chunk",
                    combine_sql="SELECT size(month) AS x FROM parts", chunks=2)
    st = run_job(dq, spec, max_attempts=3)
    assert st.state == "failed"
    [failure] = st.failures
    assert failure.startswith("the split failed after 1 attempt"), failure
    assert st.chunks is None


def test_explain_is_a_planning_call_that_starts_no_spark_job(
    spark_session: Any, tmp_path: Path
) -> None:
    from pyspark.sql.connect.shell.progress import ProgressHandler

    data = partitioned(tmp_path, flights(200))
    seen: list[Any] = []

    class Seen(ProgressHandler):
        def __call__(self, stages: Any, inflight_tasks: int, operation_id: Any,
                     done: bool) -> None:
            seen.extend(stages or ())

    spark_session.conf.set("spark.connect.progress.reportInterval", "10ms")
    frame = spark_session.read.parquet(str(data))
    frame.createOrReplaceTempView("chunk")
    query = spark_session.sql(AGG_SQL)
    handler = Seen()
    spark_session.registerProgressHandler(handler)
    try:
        text = spark_query.explain(query)
        assert "HashAggregate" in text and not seen
        query.collect()  # the check can see a job when there is one
        assert seen
    finally:
        spark_session.removeProgressHandler(handler)
        spark_session.conf.unset("spark.connect.progress.reportInterval")

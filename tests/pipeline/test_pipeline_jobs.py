"""A data job end to end on one local Spark session: split, chunks, combine; its output
against the same computation in pandas; 1, 3 and 8 chunks giving the same output; a retried
chunk adding no rows; the manifest; a failed chunk's message, and a requeue finishing the job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.testing import assertDataFrameEqual

from core.pipeline import jobs
from core.pipeline.transforms import transform
from core.queue import Queue, read
from tests.pipeline_support import run_job, run_worker, spec_for

pytestmark = pytest.mark.slow

CHUNK_SQL = ("SELECT carrier, month, dep_delay, distance FROM chunk "
             "WHERE dep_delay IS NOT NULL")
COMBINE_SQL = ("SELECT carrier, month, avg(dep_delay) AS mean_delay, count(*) AS flights "
               "FROM parts GROUP BY carrier, month")


def by_pandas(df: pd.DataFrame) -> pd.DataFrame:
    kept = df[df.dep_delay.notna()]
    out = kept.groupby(["carrier", "month"], as_index=False).agg(
        mean_delay=("dep_delay", "mean"), flights=("dep_delay", "size"))
    return out.astype({"flights": "int64"})


def test_job_output_equals_pandas_and_the_manifest_tells_the_story(
    dq: Queue, spark_session: Any, flights_parquet: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    path, df = flights_parquet
    spec = spec_for(tmp_path, path, sql=CHUNK_SQL, combine_sql=COMBINE_SQL, chunks=3)
    st = run_job(dq, spec, concurrency=2)
    assert st.state == "done", st.failures
    out = Path(spec.output)
    assert (out / "_SUCCESS").exists()
    assert not spec.staging.exists()
    got = spark_session.read.parquet(str(out))
    assertDataFrameEqual(got, spark_session.createDataFrame(by_pandas(df)), rtol=1e-9)
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest == st.manifest
    assert [c["chunk"] for c in manifest["chunks"]] == [0, 1, 2]
    assert sum(c["rows_in"] for c in manifest["chunks"]) == manifest["rows_in"] == len(df)
    assert sum(c["rows_out"] for c in manifest["chunks"]) == int(df.dep_delay.notna().sum())
    assert manifest["rows_out"] == len(by_pandas(df))
    assert all(c["attempt"] == 1 and c["seconds"] > 0 for c in manifest["chunks"])
    assert manifest["spark_version"] == spark_session.version
    assert manifest["master"] == "local[2]"
    assert manifest["sql"] == CHUNK_SQL and manifest["combine_sql"] == COMBINE_SQL
    # The chunk request and its combine follow-up finished once each.
    assert dq.state(spec.job_id) == "done"
    assert dq.state(jobs.combine_id(spec.job_id)) == "done"


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_one_three_and_eight_chunks_give_the_same_output(
    dq: Queue, spark_session: Any, flights_parquet: tuple[Path, pd.DataFrame], tmp_path: Path,
    fmt: str,
) -> None:
    path, df = flights_parquet
    outputs = []
    for n in (1, 3, 8):
        spec = spec_for(tmp_path, path, sql=CHUNK_SQL.replace("WHERE", ", id FROM chunk WHERE")
                        .replace("distance FROM chunk , id", "distance, id"),
                        chunks=n, output=str(tmp_path / f"out{n}"), output_format=fmt,
                        job_id=f"j{n}")
        st = run_job(dq, spec)
        assert st.state == "done", st.failures
        assert st.chunks == n and len(st.reports) == n
        out = Path(spec.output)
        files = sorted(p.name for p in out.iterdir() if not p.name.startswith(("_", ".")))
        assert len(files) == n and all((f.startswith("part-") and f.endswith(f".{fmt}"))
                                       or f.endswith(".snappy.parquet") for f in files)
        reader = spark_session.read.option("header", "true").option("inferSchema", "true")
        outputs.append(reader.format(fmt).load(str(out)))
    want = df[df.dep_delay.notna()][["carrier", "month", "dep_delay", "distance", "id"]]
    assert outputs[0].count() == len(want)
    for other in outputs[1:]:
        assertDataFrameEqual(other, outputs[0])
    if fmt == "csv":  # a header line in every part, that a person can open
        first = sorted((tmp_path / "out3").glob("part-*.csv"))[0].read_text().splitlines()[0]
        assert first == "carrier,month,dep_delay,distance,id"


BROKEN = Path("/nonexistent")  # set by the test: while this file exists, row 500 is "bad"


@transform("pipeline_test_flaky")
def flaky(chunk: Any) -> Any:
    """Passes rows through; fails on the chunk holding id 500 while BROKEN exists."""
    if BROKEN.exists() and chunk.filter("id = 500").count():
        raise ValueError("bad row 500: fix the data and requeue")
    return chunk


def test_a_failing_chunk_says_which_and_why_and_a_requeue_finishes_the_job(
    dq: Queue, spark_session: Any, flights_parquet: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    global BROKEN
    path, df = flights_parquet
    BROKEN = tmp_path / "broken"
    BROKEN.touch()
    spec = spec_for(tmp_path, path, transform="pipeline_test_flaky", chunks=3)
    st = run_job(dq, spec, max_attempts=1)
    assert st.state == "failed"
    [failure] = st.failures
    assert failure.startswith("chunk 2 failed after 1 attempt"), failure
    assert "bad row 500: fix the data and requeue" in failure
    assert not (Path(spec.output) / "_SUCCESS").exists()
    assert dq.state(jobs.combine_id(spec.job_id)) == "held"
    [letter] = read.request_dead_letters(dq, spec.job_id)
    assert letter.error.startswith(f"DataJobError: chunk 2 of job {spec.job_id}: ValueError")
    BROKEN.unlink()
    assert dq.requeue([letter.id]) == (1, 0)
    run_worker(dq)
    st = jobs.status(dq, spec.job_id)
    assert st.state == "done" and st.failures == []
    assert st.manifest is not None and st.manifest["chunks"][2]["attempt"] == 1
    got = spark_session.read.parquet(spec.output)
    assertDataFrameEqual(got, spark_session.createDataFrame(df))


def test_a_local_parquet_split_asks_spark_only_to_analyse_and_still_fails_once(
    dq: Queue, spark_session: Any, flights_parquet: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    """Once a worker knows its Spark has the reader, a local Parquet input's split plans from
    the footers and records no input schema (the chunks read row groups); Spark still
    analyses the SQL there, so a statement that passes the submit's check but not Spark's
    analysis fails the split once and no chunk runs."""
    _, df = flights_parquet
    path = tmp_path / "groups.parquet"
    df.to_parquet(path, index=False, row_group_size=100)  # 6 row groups: cut between them
    first = spec_for(tmp_path, path, sql=CHUNK_SQL, combine_sql=COMBINE_SQL, chunks=3,
                     output=str(tmp_path / "first"), job_id="first")
    assert run_job(dq, first).state == "done"  # the worker asked Spark about the reader
    again = spec_for(tmp_path, path, sql=CHUNK_SQL, combine_sql=COMBINE_SQL, chunks=3,
                     output=str(tmp_path / "again"), job_id="again")
    st = run_job(dq, again, concurrency=2)
    assert st.state == "done", st.failures
    record = jobs.records(dq).all("again")
    assert record["split"] == "row groups" and record["schema"] == ""
    assert record["parts_schema"]  # the analysis's: the combine reads the parts with it
    # The test server's 2 cores, shared by the chunks that run at once: one here (one slot).
    assert record["partitions"] == "2"
    got = spark_session.read.parquet(again.output)
    assertDataFrameEqual(got, spark_session.createDataFrame(by_pandas(df)), rtol=1e-9)

    bad = spec_for(tmp_path, path, sql="SELECT carrier, month FROM chunk GROUP BY month",
                   chunks=3, output=str(tmp_path / "bad"), job_id="bad")
    st = run_job(dq, bad, max_attempts=3)
    assert st.state == "failed"
    [failure] = st.failures
    assert failure.startswith("the split failed after 1 attempt"), failure
    assert "carrier" in failure and "GROUP BY" in failure.upper(), failure
    assert st.chunks is None
    assert not (Path(bad.output) / "_SUCCESS").exists()

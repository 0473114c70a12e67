"""A small job in one step (core/pipeline/onestep.py): its output and manifest are those of the
same job split in chunks, for Parquet and CSV inputs and outputs; a job asked for more chunks,
without combine SQL, or incremental is split as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.testing import assertDataFrameEqual

from core.pipeline import jobs
from core.queue import Queue
from tests.pipeline_support import flights, run_job, spec_for

pytestmark = pytest.mark.slow

# Not an aggregate: each chunk's rows out add up to the one step's. Exact aggregates in the
# combine (a float's sum in another order may differ in its last bit).
CHUNK_SQL = ("SELECT carrier, month, dep_delay, distance FROM chunk "
             "WHERE dep_delay IS NOT NULL")
COMBINE_SQL = ("SELECT carrier, month, sum(distance) AS miles, max(dep_delay) AS worst, "
               "count(*) AS flights FROM parts GROUP BY carrier, month ORDER BY carrier, month")


def run_both(q: Queue, tmp_path: Path, src: Path, fmt: str, out_fmt: str,
             ) -> tuple[jobs.JobStatus, jobs.JobStatus]:
    got = []
    for name, chunks in (("one", None), ("three", 3)):
        spec = spec_for(tmp_path, src, job_id=f"{name}-{fmt}-{out_fmt}", format=fmt,
                        sql=CHUNK_SQL, combine_sql=COMBINE_SQL, chunks=chunks,
                        output=str(tmp_path / f"out-{name}-{out_fmt}"), output_format=out_fmt)
        st = run_job(q, spec, concurrency=2)
        assert st.state == "done" and st.manifest is not None, st.failures
        assert not spec.staging.exists()  # the combine step, after the one step, cleaned up
        assert q.state(jobs.combine_id(spec.job_id)) == "done"
        got.append(st)
    return got[0], got[1]


def read(spark: Any, st: jobs.JobStatus) -> Any:
    assert st.spec is not None
    reader = spark.read.option("header", "true").option("inferSchema", "true")
    return reader.format(st.spec.output_format).load(st.spec.output)


@pytest.mark.parametrize(("fmt", "out_fmt"), [("parquet", "csv"), ("csv", "parquet")])
def test_a_small_job_in_one_step_writes_what_the_job_split_in_chunks_writes(
    dq: Queue, spark_session: Any, tmp_path: Path, fmt: str, out_fmt: str
) -> None:
    df = flights(900)
    src = tmp_path / f"flights.{fmt}"
    if fmt == "parquet":
        df.to_parquet(src, index=False)
    else:
        df.to_csv(src, index=False)
    one, three = run_both(dq, tmp_path, src, fmt, out_fmt)
    m1, m3 = one.manifest, three.manifest
    assert m1 is not None and m3 is not None
    assert m1["one_step"] is True and m3["one_step"] is False
    assert len(m1["chunks"]) == 1 and len(m3["chunks"]) == 3
    # The same keys (but the combine task's start and wait, which the one step has not).
    assert set(m1) == set(m3) - {"combine_started_ms", "combine_queued_ms"}
    assert set(m1["chunks"][0]) == set(m3["chunks"][0]) - {"write_s"}
    kept = int(df.dep_delay.notna().sum())
    assert m1["chunks"][0]["rows_out"] == sum(c["rows_out"] for c in m3["chunks"]) == kept
    assert m1["rows_in"] == m3["rows_in"] == (len(df) if fmt == "parquet" else None)
    assert m1["rows_out"] == m3["rows_out"]
    assert json.loads((Path(m1["output"]) / "_manifest.json").read_text()) == m1
    assert (Path(m1["output"]) / "_SUCCESS").exists()
    assertDataFrameEqual(read(spark_session, one), read(spark_session, three))
    if out_fmt == "csv":  # written alike, byte for byte
        [a], [b] = (list(Path(m["output"]).glob("part-*.csv")) for m in (m1, m3))
        assert a.read_text() == b.read_text()


def test_what_is_not_one_step(dq: Queue, tmp_path: Path, connect_url: str) -> None:
    """Without combine SQL the parts are the output (a chunk task writes them); an incremental
    job keeps its chunks' parts for the next run: both are split as before. (`connect_url`:
    the run's Spark server, started if this is its process's first Spark test.)"""
    src = tmp_path / "flights.parquet"
    flights(300).to_parquet(src, index=False)
    plain = spec_for(tmp_path, src, job_id="no-combine", sql=CHUNK_SQL,
                     output=str(tmp_path / "o1"))
    inc = spec_for(tmp_path, src, job_id="incremental", sql=CHUNK_SQL, combine_sql=COMBINE_SQL,
                   incremental=True, output=str(tmp_path / "o2"))
    for spec in (plain, inc):
        st = run_job(dq, spec)
        assert st.state == "done" and st.manifest is not None, st.failures
        assert not st.manifest.get("one_step"), spec.job_id
        assert st.manifest["chunks"][0]["part_written_by"] != "one step"
    assert pd.read_parquet(tmp_path / "o1")["dep_delay"].notna().all()

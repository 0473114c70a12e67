"""Cutting a Parquet input from its footers (plan.py): where the cuts fall, that the slices
hold every row exactly once, what a chunk reads, and the same job giving the same output
whatever the input's layout (one file of one row group, one file of many, many files) and
however many chunks."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.testing import assertDataFrameEqual

from core.pipeline import jobs, plan, spark
from core.pipeline.spec import make_spec
from core.queue import Queue
from core.worker import Worker, WorkerConfig
from tests.pipeline_support import (  # noqa: F401  (fixtures)
    dq,
    flights,
    run_job,
    run_worker,
    spark_session,
    spec_for,
)

SQL = "SELECT carrier, month, dep_delay, id FROM chunk WHERE dep_delay IS NOT NULL"


def files_of(*groups: tuple[int, ...]) -> list[plan.InputFile]:
    return [plan.InputFile(f"f{i}", g) for i, g in enumerate(groups)]


def test_cuts_fall_on_row_group_boundaries_when_there_are_enough_groups() -> None:
    one = files_of((100,) * 30)
    points = plan.cut_points(one, 8)
    assert points[0] == 0 and points[-1] == 3000 and len(points) == 9
    assert all(p % 100 == 0 for p in points)
    assert all(b > a for a, b in itertools.pairwise(points))  # none empty
    sizes = [b - a for a, b in itertools.pairwise(points)]
    assert max(sizes) - min(sizes) <= 100  # as even as whole groups allow


def test_cuts_fall_on_rows_when_there_are_fewer_groups_than_chunks() -> None:
    assert plan.cut_points(files_of((600,)), 3) == [0, 200, 400, 600]
    assert plan.cut_points(files_of((5,)), 8) == [0, 0, 1, 1, 2, 3, 3, 4, 5]


def test_uneven_groups_leave_no_slice_empty() -> None:
    points = plan.cut_points(files_of((1000, 1, 1, 1)), 4)
    assert points == [0, 1000, 1001, 1002, 1003]


def test_slices_cover_every_row_once_and_whole_files_stay_whole() -> None:
    files = files_of((100,), (100,), (50, 50), (100,))
    cut = plan.slices(files, 2)
    assert [[(p.path, p.start, p.stop) for p in s] for s in cut] == [
        [("f0", 0, 100), ("f1", 0, 100)], [("f2", 0, 100), ("f3", 0, 100)]]
    assert all(p.whole for s in cut for p in s)
    inside = plan.slices(files_of((30, 30, 30)), 2)  # a cut inside the file: not whole
    assert [[(p.start, p.stop, p.whole) for p in s] for s in inside] == [
        [(0, 30, False)], [(30, 90, False)]]  # a tie between two boundaries: the first
    for n in (1, 3, 7, 400):
        covered = [(p.path, r) for s in plan.slices(files, n) for p in s
                   for r in range(p.start, p.stop)]
        assert len(covered) == len(set(covered)) == 400


def write_groups(path: Path, df: pd.DataFrame, group_rows: int) -> None:
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path,
                   row_group_size=group_rows)


def test_read_pieces_reads_exactly_its_rows_and_only_the_columns_asked(tmp_path: Path) -> None:
    df = flights(1000)
    path = tmp_path / "f.parquet"
    write_groups(path, df, 128)
    assert pq.ParquetFile(path).metadata.num_row_groups == 8
    piece = plan.Piece(str(path), 100, 700, 1000)  # starts and ends inside a group
    got = pa.Table.from_batches(
        [b for _, b in plan.read_pieces([piece], ["id", "carrier"])]).to_pandas()
    assert list(got.columns) == ["id", "carrier"]
    assert got.id.tolist() == list(range(100, 700))
    staged = tmp_path / "staged"
    assert plan.stage([], ["id"], staged, probe=str(path)) == 0  # an empty slice: a schema
    assert pq.read_table(staged).schema.names == ["id"]


def test_a_partitioned_directory_or_another_format_is_left_to_spark(tmp_path: Path) -> None:
    part = tmp_path / "by_month" / "month=1"
    part.mkdir(parents=True)
    write_groups(part / "a.parquet", flights(10), 10)
    spec = make_spec(job_id="p", input=str(tmp_path / "by_month"), format="parquet",
                     output=str(tmp_path / "out"), sql="SELECT * FROM chunk")
    assert plan.input_files(spec) is None
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("b.parquet", "a.parquet", "_SUCCESS", ".a.parquet.crc"):
        write_groups(flat / name, flights(10), 10) if name.endswith("parquet") \
            else (flat / name).write_text("")
    spec = make_spec(job_id="q", input=str(flat), format="parquet",
                     output=str(tmp_path / "out"), sql="SELECT * FROM chunk")
    assert plan.input_files(spec) == [str(flat / "a.parquet"), str(flat / "b.parquet")]


def test_spark_says_which_columns_a_statement_reads(
    spark_session: Any, tmp_path: Path
) -> None:
    path = tmp_path / "f.parquet"
    write_groups(path, flights(10), 10)
    s = spark_session.newSession()
    s.read.parquet(str(path)).createOrReplaceTempView("chunk")
    s.read.parquet(str(path)).createOrReplaceTempView("other")
    read = spark.scan_columns(s.sql("SELECT carrier, avg(dep_delay) FROM chunk GROUP BY 1"),
                              str(path))
    assert sorted(read or []) == ["carrier", "dep_delay"]
    assert spark.scan_columns(s.sql("SELECT count(*) FROM chunk"), str(path)) == []
    assert spark.scan_columns(s.sql("SELECT 1 AS x"), str(path)) is None  # no scan of it


LAYOUTS = ("one group", "many groups", "many files")


def lay_out(tmp_path: Path, df: pd.DataFrame, layout: str) -> Path:
    if layout == "many files":
        d = tmp_path / "files"
        d.mkdir()
        for i in range(0, len(df), 100):
            write_groups(d / f"part-{i:05d}.parquet", df.iloc[i:i + 100], 100)
        return d
    path = tmp_path / f"{layout.replace(' ', '_')}.parquet"
    write_groups(path, df, len(df) if layout == "one group" else 50)
    return path


@pytest.mark.slow
def test_the_same_job_gives_the_same_output_whatever_the_layout_and_chunks(
    dq: Queue, spark_session: Any, tmp_path: Path
) -> None:
    df = flights(600)
    want = spark_session.createDataFrame(
        df[df.dep_delay.notna()][["carrier", "month", "dep_delay", "id"]])
    splits = {}
    for layout in LAYOUTS:
        data = lay_out(tmp_path, df, layout)
        for n in (1, 3, 8):
            job = f"{layout.replace(' ', '-')}-{n}"
            spec = spec_for(tmp_path, data, sql=SQL, chunks=n, job_id=job,
                            output=str(tmp_path / f"out-{job}"))
            st = run_job(dq, spec)
            assert st.state == "done", st.failures
            assert st.manifest is not None
            assert sum(c["rows_in"] for c in st.manifest["chunks"]) == len(df)
            splits[(layout, n)] = st.manifest["split"]
            assertDataFrameEqual(spark_session.read.parquet(spec.output), want)
            assert not spec.staging.exists()
    assert splits[("one group", 3)] == "rows"
    assert splits[("many groups", 8)] == "row groups"  # 12 groups of 50
    assert splits[("many files", 3)] == "files"  # 6 files of 100: no staging at all
    assert splits[("many files", 8)] == "rows"  # 6 files of one group for 8 chunks


@pytest.mark.slow
def test_a_python_transform_gets_every_column_of_a_staged_slice(
    dq: Queue, spark_session: Any, tmp_path: Path
) -> None:
    from core.pipeline.transforms import transform

    @transform("pipeline_test_all_columns")
    def all_columns(chunk: Any) -> Any:
        return chunk.selectExpr(f"'{','.join(chunk.columns)}' AS cols").limit(1)

    data = lay_out(tmp_path, flights(600), "many groups")
    spec = spec_for(tmp_path, data, transform="pipeline_test_all_columns", chunks=3)
    st = run_job(dq, spec)
    assert st.state == "done", st.failures
    got = {r.cols for r in spark_session.read.parquet(spec.output).collect()}
    assert got == {"id,carrier,month,dep_delay,distance"}


@pytest.mark.slow
def test_a_corrupt_input_file_fails_the_split_with_a_message(
    dq: Queue, spark_session: Any, tmp_path: Path
) -> None:
    d = tmp_path / "files"
    d.mkdir()
    write_groups(d / "a.parquet", flights(10), 10)
    (d / "b.parquet").write_bytes(b"this is not parquet")
    spec = spec_for(tmp_path, d, sql=SQL, chunks=2)
    st = run_job(dq, spec, max_attempts=1)
    assert st.state == "failed"
    [failure] = st.failures
    assert failure.startswith("the split failed after 1 attempt(s)"), failure
    assert "an input file is corrupt or not in the format given (--format)" in failure
    assert "b.parquet" in failure or "magic" in failure.lower()


@pytest.mark.slow
def test_an_input_file_removed_after_the_split_fails_its_chunk_with_a_message(
    dq: Queue, spark_session: Any, tmp_path: Path
) -> None:
    data = lay_out(tmp_path, flights(600), "many groups")
    spec = spec_for(tmp_path, data, sql=SQL, chunks=3)
    jobs.submit(dq, spec, jobs.QueueOptions(max_attempts=1))
    import core.pipeline.tasks  # noqa: F401  (registers the datajob handler)

    Worker([dq], WorkerConfig(burst=True, heartbeat="thread", max_tasks=1, prefetch=1,
                              idle_wait=0.1, grace=5)).run()  # the split alone
    assert jobs.status(dq, spec.job_id).chunks == 3
    data.unlink()
    run_worker(dq)
    st = jobs.status(dq, spec.job_id)
    assert st.state == "failed"
    assert len(st.failures) == 3
    assert all("a file is missing" in f and "many_groups.parquet" in f
               for f in st.failures), st.failures


def test_an_input_file_gone_before_the_split_is_named(
    dq: Queue, spark_session: Any, tmp_path: Path
) -> None:
    data = lay_out(tmp_path, flights(600), "many files")
    spec = spec_for(tmp_path, data, sql=SQL, chunks=3)
    (data / "part-00100.parquet").unlink()
    (data / "part-00100.parquet").symlink_to(tmp_path / "nowhere.parquet")
    st = run_job(dq, spec, max_attempts=1)
    [failure] = st.failures
    assert "the split of job" in failure and "a file is missing" in failure, failure
    assert "part-00100.parquet" in failure


@pytest.mark.parametrize(("master", "setting", "want"), [
    ("local[*]", 0, os.cpu_count() or 2), ("local[3]", 0, 3), ("local[4, 2]", 0, 4),
    ("local", 0, 1), ("spark://host:7077", 0, 8), ("local[*]", 12, 12),
])
def test_shuffle_partitions_follow_the_local_threads_unless_set(
    master: str, setting: int, want: int
) -> None:
    conf = spark.base_conf(spark.SparkTarget(master=master, shuffle_partitions=setting),
                           app="t", local_dir=None)
    assert conf["spark.sql.shuffle.partitions"] == str(want)


def test_spark_conf_entries_override_the_defaults_and_add_to_the_drivers_java_options() -> None:
    target = spark.SparkTarget(conf=spark.parse_conf(
        "spark.driver.memory=8g; spark.sql.shuffle.partitions = 5\n"
        "spark.driver.extraJavaOptions=-XX:+UseG1GC -Xss4m"))
    conf = spark.base_conf(target, app="t", local_dir=None)
    assert conf["spark.driver.memory"] == "8g"
    assert conf["spark.sql.shuffle.partitions"] == "5"
    java = conf["spark.driver.extraJavaOptions"]
    assert java.startswith("-Dlog4j2.configurationFile=") and java.endswith("-XX:+UseG1GC -Xss4m")
    quick = spark.base_conf(target.quick_start(), app="t", local_dir=None)
    assert quick["spark.driver.extraJavaOptions"].endswith("-Xss4m -XX:TieredStopAtLevel=1")


@pytest.mark.parametrize("bad", ["driver.memory=8g", "spark.driver.memory", "spark.x=",
                                 "spark.a b=1"])
def test_a_spark_conf_entry_that_is_no_setting_is_refused_by_name(bad: str) -> None:
    with pytest.raises(spark.SparkConfError, match=re.escape(repr(bad))):
        spark.parse_conf(f"spark.ui.enabled=false;{bad}")


def test_the_drivers_jvm_runs_with_the_java_options_given(spark_session: Any) -> None:
    """The suite's SPARK_CONF (tests/conftest.py) reached the JVM itself, not only its conf."""
    jvm = spark_session.sparkContext._jvm
    flags = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert "-XX:TieredStopAtLevel=1" in flags, flags


@pytest.mark.slow
def test_a_slice_over_files_of_different_schemas_says_which_differ(
    dq: Queue, spark_session: Any, tmp_path: Path
) -> None:
    d = tmp_path / "files"
    d.mkdir()
    df = flights(10)
    write_groups(d / "a.parquet", df[["id", "carrier"]], 10)
    write_groups(d / "b.parquet", df[["carrier"]].assign(id=df.id.astype(str)), 10)
    spec = spec_for(tmp_path, d, sql="SELECT id, carrier FROM chunk", chunks=3)
    st = run_job(dq, spec, max_attempts=1)
    assert st.state == "failed"
    # Chunk 1 spans both files; chunk 2 reads b alone, as this worker's first chunk of the
    # job (chunk 0, file a) saw the input's schema.
    first, second = sorted(st.failures)
    assert first.startswith("chunk 1 failed") and second.startswith("chunk 2 failed")
    assert "the input's files do not share one schema (a column's type differs" in second
    failure = first
    assert (f"the input's files do not share one schema: {d / 'b.parquet'} has "
            f"(id string, carrier string) where {d / 'a.parquet'} has (id int64, carrier "
            "string)") in failure
    assert not list(spec.chunk_dir(1).parent.glob(".tmp-*"))  # no half-staged slice left


@pytest.mark.slow
@pytest.mark.parametrize("analysed", [False, True])
def test_sql_spark_refuses_fails_the_split_once_unless_analysed_at_submit(
    dq: Queue, spark_session: Any, tmp_path: Path, analysed: bool
) -> None:
    data = lay_out(tmp_path, flights(600), "many groups")
    spec = spec_for(tmp_path, data, sql="SELECT no_such_column FROM chunk", chunks=3)
    jobs.submit(dq, spec, jobs.QueueOptions(max_attempts=3), analysed=analysed)
    run_worker(dq)
    st = jobs.status(dq, spec.job_id)
    assert st.state == "failed"
    # No retry can fix a statement: dead at the first attempt, whatever attempts are left.
    assert all(" after 1 attempt(s) " in f for f in st.failures), st.failures
    if analysed:  # what `datajob submit` refuses never gets here; the chunks then fail
        assert len(st.failures) == 3 and all(f.startswith("chunk ") for f in st.failures)
    else:  # the console's form: the split analyses it and fails alone, with the reason
        [failure] = st.failures
        assert failure.startswith("the split failed after 1 attempt(s)"), failure
        assert "--sql names `no_such_column`, which the data does not have" in failure
        assert st.chunks is None


@pytest.mark.slow
def test_a_csv_input_is_staged_with_only_the_columns_its_sql_reads(
    dq: Queue, spark_session: Any, tmp_path: Path
) -> None:
    data = tmp_path / "flights.csv"
    flights(300).rename(columns={"distance": "dist.km"}).to_csv(data, index=False)
    spec = spec_for(tmp_path, data, format="csv", chunks=2,
                    sql="SELECT carrier, `dist.km` FROM chunk WHERE month > 6")
    jobs.submit(dq, spec, jobs.QueueOptions(max_attempts=1))
    import core.pipeline.tasks  # noqa: F401  (registers the datajob handler)

    Worker([dq], WorkerConfig(burst=True, heartbeat="thread", max_tasks=1, prefetch=1,
                              idle_wait=0.1, grace=5)).run()  # the split alone
    staged = pq.read_schema(next(spec.chunk_dir(0).glob("*.parquet")))
    assert staged.names == ["carrier", "month", "dist.km"]  # not id, dep_delay
    run_worker(dq)
    st = jobs.status(dq, spec.job_id)
    assert st.state == "done", st.failures
    assert st.manifest is not None and st.manifest["split"] == "spark"
    assert st.manifest["rows_in"] == 300


@pytest.mark.slow
def test_a_failed_job_cancelled_to_tidy_up_still_says_it_failed(
    dq: Queue, spark_session: Any, tmp_path: Path
) -> None:
    data = lay_out(tmp_path, flights(60), "one group")
    spec = spec_for(tmp_path, data, sql="SELECT nope FROM chunk", chunks=2)
    st = run_job(dq, spec)
    assert st.state == "failed" and len(st.failures) == 1
    (spec.staging / "parts" / "00000").mkdir(parents=True)  # as a failed job may leave it
    assert jobs.remove_staging(dq, spec.job_id).removed_bytes is None  # failed: kept
    [done] = jobs.cancel(dq, [spec.job_id], wait_s=0)
    assert done.removed_bytes is not None and not spec.staging.exists()  # cancelled: gone
    after = jobs.status(dq, spec.job_id)
    assert after.state == "failed" and after.cancelled
    assert after.failures == st.failures

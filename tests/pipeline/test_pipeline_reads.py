"""Chunks read where they are, on the run's Spark Connect server: the same job gives the same
output whatever the input's layout (one file of one row group, one file of many, many files,
a partitioned folder, CSV, JSON lines) and however many chunks, every row once; and what goes
wrong with the input is a message that says what (a corrupt file, a file removed, files of
different schemas, SQL that only Spark can tell is wrong)."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql.types import StructType

from core.pipeline import io, jobs, plan, spark_query
from core.pipeline.transforms import transform
from core.queue import Queue
from core.worker import Worker, WorkerConfig
from tests.pipeline_support import flights, run_job, run_worker, spec_for

pytestmark = pytest.mark.slow

SQL = "SELECT carrier, month, dep_delay, id FROM chunk WHERE dep_delay IS NOT NULL"
LAYOUTS = ("one group", "many groups", "many files", "partitioned", "csv", "json")


def write_groups(path: Path, df: pd.DataFrame, group_rows: int) -> None:
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path,
                   row_group_size=group_rows)


def lay_out(tmp_path: Path, df: pd.DataFrame, layout: str) -> tuple[Path, str]:
    """The same rows as an input of `layout`, and its format."""
    if layout == "many files":
        d = tmp_path / "files"
        d.mkdir()
        for i in range(0, len(df), 100):
            write_groups(d / f"part-{i:05d}.parquet", df.iloc[i:i + 100], 100)
        return d, "parquet"
    if layout == "partitioned":
        d = tmp_path / "by_carrier"
        for carrier, rows in df.groupby("carrier"):
            (d / f"carrier={carrier}").mkdir(parents=True)
            write_groups(d / f"carrier={carrier}" / "part-0.parquet",
                         rows.drop(columns="carrier"), 1000)
        return d, "parquet"
    if layout == "csv":
        path = tmp_path / "flights.csv"
        df.to_csv(path, index=False)
        return path, "csv"
    if layout == "json":
        path = tmp_path / "flights.jsonl"
        path.write_text("".join(json.dumps({k: (None if pd.isna(v) else v) for k, v in r.items()})
                                + "\n" for r in df.to_dict("records")))
        return path, "json"
    path = tmp_path / f"{layout.replace(' ', '_')}.parquet"
    write_groups(path, df, len(df) if layout == "one group" else 50)
    return path, "parquet"


def rows_of(spark_session: Any, path: str) -> list[tuple[Any, ...]]:
    got = spark_session.read.parquet(path).selectExpr(
        "carrier", "cast(month AS bigint) AS month", "cast(dep_delay AS double) AS d",
        "cast(id AS bigint) AS id").collect()
    return sorted((r.carrier, r.month, r.d, r.id) for r in got)


def test_the_same_job_gives_the_same_output_whatever_the_layout_and_chunks(
    dq: Queue, spark_session: Any, tmp_path: Path
) -> None:
    df = flights(600)
    kept = df[df.dep_delay.notna()]
    want = sorted(zip(kept.carrier, kept.month, kept.dep_delay, kept.id, strict=True))
    splits = {}
    for layout in LAYOUTS:
        data, fmt = lay_out(tmp_path, df, layout)
        for n in (1, 3, 8):
            job = f"{layout.replace(' ', '-')}-{n}"
            spec = spec_for(tmp_path, data, format=fmt, sql=SQL, chunks=n, job_id=job,
                            output=str(tmp_path / f"out-{job}"))
            st = run_job(dq, spec)
            assert st.state == "done", (layout, n, st.failures)
            assert st.manifest is not None
            if fmt == "parquet":  # from the footers; a CSV's or JSON's rows are not counted
                assert sum(c["rows_in"] for c in st.manifest["chunks"]) == len(df)
                assert st.manifest["rows_in"] == len(df)
            else:
                assert st.manifest["rows_in"] is None
            splits[(layout, n)] = (st.manifest["split"], len(st.manifest["chunks"]))
            assert rows_of(spark_session, spec.output) == want, (layout, n)
            assert not spec.staging.exists()
    assert splits[("one group", 3)] == ("rows", 3)  # 600 rows in one group: cut on rows
    assert splits[("many groups", 8)] == ("row groups", 8)  # 12 groups of 50
    assert splits[("many files", 3)] == ("files", 3)  # 6 files of 100: whole files
    assert splits[("many files", 8)] == ("rows", 8)  # more chunks than groups
    assert splits[("partitioned", 3)] == ("files", 3)  # 5 folders, one file each
    assert splits[("partitioned", 8)] == ("files", 5)  # never more chunks than files there
    assert splits[("csv", 3)] == ("byte ranges", 3)
    assert splits[("json", 8)] == ("byte ranges", 8)


def test_a_python_transform_gets_every_column_of_its_slice(
    dq: Queue, connect_url: str, spark_session: Any, tmp_path: Path
) -> None:
    @transform("pipeline_test_all_columns")
    def all_columns(chunk: Any) -> Any:
        return chunk.selectExpr(f"'{','.join(chunk.columns)}' AS cols").limit(1)

    data, _ = lay_out(tmp_path, flights(600), "many groups")
    spec = spec_for(tmp_path, data, transform="pipeline_test_all_columns", chunks=3)
    st = run_job(dq, spec)
    assert st.state == "done", st.failures
    got = {r.cols for r in spark_session.read.parquet(spec.output).collect()}
    assert got == {"id,carrier,month,dep_delay,distance"}


def test_a_corrupt_input_file_fails_the_split_with_a_message(
    dq: Queue, connect_url: str, tmp_path: Path
) -> None:
    d = tmp_path / "files"
    d.mkdir()
    write_groups(d / "a.parquet", flights(10), 10)
    write_groups(d / "b.parquet", flights(10), 10)
    spec = spec_for(tmp_path, d, sql=SQL, chunks=2)
    (d / "b.parquet").write_bytes(b"this is not parquet")  # after the submit's checks
    st = run_job(dq, spec, max_attempts=1)
    assert st.state == "failed"
    [failure] = st.failures
    assert failure.startswith("the split failed after 1 attempt"), failure
    assert f"{d / 'b.parquet'} is corrupt or not Parquet (--format)" in failure, failure


def test_an_input_file_removed_after_the_split_fails_its_chunk_with_a_message(
    dq: Queue, connect_url: str, tmp_path: Path
) -> None:
    data, _ = lay_out(tmp_path, flights(600), "many groups")
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
    assert all("many_groups.parquet" in f for f in st.failures), st.failures


def test_files_of_different_schemas_fail_with_a_message_naming_the_mismatch(
    dq: Queue, connect_url: str, tmp_path: Path
) -> None:
    d = tmp_path / "files"
    d.mkdir()
    df = flights(10)
    write_groups(d / "a.parquet", df[["id", "carrier"]], 10)
    write_groups(d / "b.parquet", df[["carrier"]].assign(id=df.id.astype(str)), 10)
    spec = spec_for(tmp_path, d, sql="SELECT id, carrier FROM chunk", chunks=2)
    st = run_job(dq, spec, max_attempts=1)
    assert st.state == "failed"
    assert any("do not share one schema" in f or "PARQUET_COLUMN_DATA_TYPE_MISMATCH" in f
               for f in st.failures), st.failures


def test_sql_only_spark_can_refuse_fails_the_split_once_with_its_reason(
    dq: Queue, connect_url: str, tmp_path: Path
) -> None:
    """The submit's check resolves names; a type Spark will not accept (size() of a number
    here) is found by the split's analysis on Spark: one dead letter, at the first attempt,
    and no chunk ever runs."""
    data, _ = lay_out(tmp_path, flights(600), "many groups")
    spec = spec_for(tmp_path, data, sql="SELECT size(month) AS x FROM chunk", chunks=3)
    st = run_job(dq, spec, max_attempts=3)
    assert st.state == "failed"
    [failure] = st.failures
    assert failure.startswith("the split failed after 1 attempt"), failure
    assert "--sql cannot run on this data" in failure, failure
    assert st.chunks is None


def test_a_value_the_sql_cannot_take_fails_each_chunk_once_not_three_times(
    dq: Queue, connect_url: str, tmp_path: Path
) -> None:
    """A data exception (SQLSTATE 22...: a carrier code cast to a date) is in the data: no
    retry changes it, so each chunk is a dead letter at its first attempt."""
    data, _ = lay_out(tmp_path, flights(60), "many groups")
    spec = spec_for(tmp_path, data, sql="SELECT add_months(carrier, 1) AS x FROM chunk",
                    chunks=2)
    st = run_job(dq, spec, max_attempts=3)
    assert st.state == "failed" and len(st.failures) == 2
    assert all(" after 1 attempt " in f and "CAST_INVALID_INPUT" in f
               for f in st.failures), st.failures


def test_a_failed_job_cancelled_to_tidy_up_still_says_it_failed(
    dq: Queue, connect_url: str, tmp_path: Path
) -> None:
    data, _ = lay_out(tmp_path, flights(60), "one group")
    spec = spec_for(tmp_path, data, sql="SELECT size(month) AS x FROM chunk", chunks=2)
    st = run_job(dq, spec)
    assert st.state == "failed" and len(st.failures) == 1
    (spec.staging / "parts" / "00000").mkdir(parents=True)  # as a failed job may leave it
    assert jobs.remove_staging(dq, spec.job_id).removed_bytes is None  # failed: kept
    [done] = jobs.cancel(dq, [spec.job_id], wait_s=0)
    assert done.removed_bytes is not None and not spec.staging.exists()  # cancelled: gone
    after = jobs.status(dq, spec.job_id)
    assert after.state == "failed" and after.cancelled
    assert after.failures == st.failures


def test_concurrent_slots_keep_their_views_apart(
    dq: Queue, connect_url: str, spark_session: Any, tmp_path: Path
) -> None:
    """Two slots of one worker, each its own Connect session: two jobs whose chunks run at
    once never read each other's `chunk` view."""
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
    a, _ = lay_out(tmp_path / "a", flights(400, seed=1), "many groups")
    b, _ = lay_out(tmp_path / "b", flights(400, seed=2), "many groups")
    specs = [spec_for(tmp_path, p, sql="SELECT id, carrier FROM chunk", chunks=4, job_id=j,
                      output=str(tmp_path / f"out-{j}")) for p, j in ((a, "ja"), (b, "jb"))]
    for spec in specs:
        jobs.submit(dq, spec, jobs.QueueOptions())
    run_worker(dq, slots=2)
    for spec, seed in zip(specs, (1, 2), strict=True):
        assert jobs.status(dq, spec.job_id).state == "done"
        want = flights(400, seed=seed)
        got = spark_session.read.parquet(spec.output).toPandas().sort_values("id")
        assert got.carrier.tolist() == want.carrier.tolist()


# -- what the split and the combine read without Spark's file reader -----------------------


def typed_table() -> pa.Table:
    """Columns of every type footer_frame() maps itself: nested ones, a zoned timestamp, a
    decimal, a date; nulls in each."""
    utc = pa.timestamp("us", tz="UTC")
    return pa.table({
        "b": pa.array([True, None, False]), "i8": pa.array([1, None, 3], pa.int8()),
        "i64": pa.array([1, 2, None], pa.int64()), "f": pa.array([0.5, None, 2.0]),
        "s": pa.array(["a", None, "c"]), "bin": pa.array([b"x", None, b"z"]),
        "d": pa.array([1, None, 19_000], pa.date32()),
        "ts": pa.array([0, 1_700_000_000_000_000, None], utc),
        "dec": pa.array([None, Decimal("1.00"), Decimal("2.50")], pa.decimal128(12, 2)),
        "l": pa.array([[1, 2], None, []], pa.list_(pa.int32())),
        "st": pa.array([{"x": 1, "y": "a"}, None, {"x": None, "y": "c"}]),
        "m": pa.array([[("k", 1.0)], None, []], pa.map_(pa.string(), pa.float64())),
    })


def test_a_footer_gives_the_columns_spark_reads(spark_session: Any, tmp_path: Path) -> None:
    path = tmp_path / "typed.parquet"
    pq.write_table(typed_table(), path)
    frame = io.footer_frame(spark_session, plan.read_footers([str(path), str(path)]))
    assert frame is not None
    spark = spark_session.read.parquet(str(path)).schema
    assert [(f.name, f.dataType) for f in frame.schema.fields] == \
        [(f.name, f.dataType) for f in spark.fields]
    assert frame.count() == 0


@pytest.mark.parametrize("case", ["int96", "naive timestamp", "unsigned", "two schemas"])
def test_a_footer_spark_might_read_otherwise_leaves_it_to_spark(
    spark_session: Any, tmp_path: Path, case: str
) -> None:
    path, other = tmp_path / "a.parquet", tmp_path / "b.parquet"
    files = [str(path)]
    if case == "int96":
        pq.write_table(pa.table({"t": pa.array([0], pa.timestamp("us", tz="UTC"))}), path,
                       use_deprecated_int96_timestamps=True)
    elif case == "naive timestamp":  # TimestampType or TimestampNTZ: Spark's settings say
        pq.write_table(pa.table({"t": pa.array([0], pa.timestamp("us"))}), path)
    elif case == "unsigned":
        pq.write_table(pa.table({"u": pa.array([1], pa.uint32())}), path)
    else:
        pq.write_table(pa.table({"x": [1]}), path)
        pq.write_table(pa.table({"x": ["1"]}), other)
        files.append(str(other))
    assert io.footer_frame(spark_session, plan.read_footers(files)) is None


def test_small_parts_reach_spark_as_they_were_written(
    spark_session: Any, tmp_path: Path
) -> None:
    """Parts Spark wrote (a zoned timestamp, a decimal, nested columns), read here and cast
    to the split's schema, hold the rows Spark reads from them; past the size limit, or not
    of the schema, they are left to Spark."""
    src = tmp_path / "typed.parquet"
    pq.write_table(typed_table(), src)
    dirs = [tmp_path / "parts" / f"{k:05d}" for k in range(2)]
    for d, where in zip(dirs, ("i64 IS NULL OR i64 % 2 = 0", "i64 % 2 = 1"), strict=True):
        spark_session.read.parquet(str(src)).where(where).write.parquet(str(d))
    schema = spark_session.read.parquet(*(str(d) for d in dirs)).schema
    frame = io.small_parts_frame(spark_session, dirs, schema)
    assert frame is not None
    got = sorted(frame.collect(), key=str)
    assert got == sorted(spark_session.read.parquet(*(str(d) for d in dirs)).collect(), key=str)
    assert len(got) == 3
    assert io.small_parts_frame(spark_session, dirs[:1], StructType(schema.fields[:2])) is None
    big = tmp_path / "big" / "00000"
    big.mkdir(parents=True)
    pq.write_table(pa.table({"x": np.random.default_rng(1).random(400_000)}),
                   big / "part-0.parquet")
    assert io.small_parts_frame(spark_session, [big], StructType()) is None


def test_a_tiny_combine_shuffles_into_one_partition_and_gives_the_setting_back(
    spark_session: Any,
) -> None:
    key = spark_query.SHUFFLE_PARTITIONS
    before = spark_session.conf.get(key)
    frame = spark_session.createDataFrame(pa.table({"k": [3, 1, 2, 1]}))
    try:
        spark_query.shuffle_into(spark_session, 1)
        assert spark_session.conf.get(key) == "1"
        ordered = frame.groupBy("k").count().orderBy("k")
        assert [r.k for r in ordered.collect()] == [1, 2, 3]
        spark_query.shuffle_into(spark_session, 1)  # unchanged: nothing sent, still 1
        assert spark_session.conf.get(key) == "1"
        spark_query.shuffle_into(spark_session, None)
        assert spark_session.conf.get(key) == before
    finally:
        spark_query.shuffle_into(spark_session, None)


def test_adaptive_execution_is_turned_off_for_a_chunk_and_given_back(
    spark_session: Any,
) -> None:
    key = spark_query.ADAPTIVE
    before = spark_session.conf.get(key)
    try:
        spark_query.adaptive(spark_session, False)
        assert spark_session.conf.get(key) == "false"
        frame = spark_session.createDataFrame(pa.table({"k": [3, 1, 2, 1]}))
        assert sorted((r.k, r["count"]) for r in frame.groupBy("k").count().collect()) == [
            (1, 2), (2, 1), (3, 1)]
        spark_query.adaptive(spark_session, True)
        assert spark_session.conf.get(key) == before
    finally:
        spark_query.adaptive(spark_session, True)


def test_sql_over_sends_its_views_with_the_query_and_leaves_no_temporary_view(
    spark_session: Any,
) -> None:
    from pyspark.errors import AnalysisException

    chunk = spark_session.createDataFrame(pa.table({"k": [1, 2, 2], "v": [10, 20, 30]}))
    names = spark_session.createDataFrame(pa.table({"k": [1, 2], "name": ["a", "b"]}))
    query = spark_query.sql_over(
        spark_session, "SELECT name, sum(v) AS s FROM chunk JOIN names USING (k) "
        "GROUP BY name ORDER BY name", {"chunk": chunk, "names": names})
    assert [tuple(r) for r in query.collect()] == [("a", 10), ("b", 50)]
    # The views went with the query (this PySpark has the plan for it): none was registered.
    tables = {t.name for t in spark_session.catalog.listTables()}
    assert not tables & {"chunk", "names"}, tables
    with pytest.raises(AnalysisException, match="nope"):
        spark_query.sql_over(spark_session, "SELECT nope FROM chunk", {"chunk": chunk}).schema  # noqa: B018


TYPED_GROUPS = "b, i8, s, bin, d, ts, dec, l, st"
TYPED_SQL = (f"SELECT {TYPED_GROUPS}, first(m) AS m, count(*) AS n, sum(id) AS total "
             f"FROM chunk GROUP BY {TYPED_GROUPS}")
TYPED_COMBINE = (f"SELECT {TYPED_GROUPS}, first(m) AS m, sum(n) AS n, sum(total) AS total "
                 f"FROM parts GROUP BY {TYPED_GROUPS}")


def typed_input(tmp_path: Path, copies: int = 40) -> Path:
    """typed_table()'s three rows `copies` times, with an id, in row groups of 10 rows."""
    table = pa.concat_tables([typed_table()] * copies)
    table = table.append_column("id", pa.array(range(len(table)), pa.int64()))
    path = tmp_path / "typed.parquet"
    pq.write_table(table, path, row_group_size=10)
    return path


def written_by(st: jobs.JobStatus) -> list[str]:
    assert st.state == "done", st.failures
    assert st.manifest is not None
    return [c["part_written_by"] for c in st.manifest["chunks"]]


def test_an_aggregate_comes_back_to_its_worker_and_gives_what_spark_writes(
    dq: Queue, spark_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An aggregate's chunks come back over Arrow and the worker writes their parts; the
    output (every type footer_frame() knows, nulls, nested columns) is the one Spark gives
    when its tasks write the parts."""
    from core.pipeline import chunk as chunk_step

    src = typed_input(tmp_path)

    def job(name: str, sql: str = TYPED_SQL) -> jobs.JobStatus:
        return run_job(dq, spec_for(tmp_path, src, sql=sql, combine_sql=TYPED_COMBINE,
                                    chunks=4, output=str(tmp_path / name)))

    returned = job("returned")
    assert written_by(returned) == ["worker"] * 4
    assert returned.manifest is not None
    assert [c["rows_out"] for c in returned.manifest["chunks"]] == [3, 3, 3, 3]
    # Parts the combine leaves to Spark to read (over 2 MiB), and chunks with no row left.
    monkeypatch.setattr(io, "SMALL_PARTS_BYTES", 0)
    empty = job("read-by-spark", TYPED_SQL.replace("GROUP BY", "WHERE id < 30 GROUP BY"))
    assert written_by(empty) == ["worker"] * 4
    assert empty.manifest is not None
    assert [c["rows_out"] for c in empty.manifest["chunks"]] == [3, 0, 0, 0]
    monkeypatch.setattr(chunk_step, "_returns", lambda *args: False)
    by_spark = job("by-spark")
    assert written_by(by_spark) == ["spark"] * 4
    want = spark_session.read.parquet(str(tmp_path / "by-spark"))
    for name in ("returned", "read-by-spark"):
        got = spark_session.read.parquet(str(tmp_path / name))
        assert got.schema == want.schema
        rows = sorted(got.collect(), key=str)
        if name == "returned":
            assert rows == sorted(want.collect(), key=str)
            assert sorted((r.n, r.total) for r in rows) == [
                (40, sum(range(i, 120, 3))) for i in range(3)]
        else:  # ids 0-29: the first 10 copies of the three rows
            assert sorted((r.n, r.total) for r in rows) == [
                (10, sum(range(i, 30, 3))) for i in range(3)]


def test_a_small_combine_comes_back_to_its_worker_and_gives_what_spark_writes(
    dq: Queue, spark_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The combine step of small parts, whose SQL aggregates, is fetched over Arrow and its
    worker writes the output's one Parquet file: the same columns, types (every type
    footer_frame() knows, nulls, nested columns) and rows in the same order as Spark's write.
    A combine that does not aggregate, a column Arrow would change, a name twice, or an output
    in another format is left to Spark (which refuses the name twice, as it always did)."""
    from core.pipeline import combine as combine_step

    src = typed_input(tmp_path)
    ordered = TYPED_COMBINE + " ORDER BY total DESC"

    def job(name: str, combine: str = ordered, **kw: Any) -> jobs.JobStatus:
        return run_job(dq, spec_for(tmp_path, src, sql=TYPED_SQL, combine_sql=combine,
                                    chunks=2, output=str(tmp_path / name), **kw))

    def output_by(st: jobs.JobStatus) -> str:
        assert st.state == "done", st.failures
        assert st.manifest is not None
        return str(st.manifest["output_written_by"])

    here = job("here")
    assert output_by(here) == "worker"
    assert here.manifest is not None and here.manifest["rows_out"] == 3
    assert [p.name for p in io.data_files(tmp_path / "here")] == ["part-00000.snappy.parquet"]
    monkeypatch.setattr(combine_step, "_combined_here", lambda *args: None)
    by_spark = job("by-spark")
    monkeypatch.undo()
    assert output_by(by_spark) == "spark"
    got = spark_session.read.parquet(str(tmp_path / "here"))
    want = spark_session.read.parquet(str(tmp_path / "by-spark"))
    assert got.schema == want.schema
    assert got.collect() == want.collect()  # in the ORDER BY's order
    assert [r.total for r in got.collect()] == sorted(
        (sum(range(i, 120, 3)) for i in range(3)), reverse=True)

    rows = job("rows", "SELECT s, n FROM parts")
    ntz = job("ntz", "SELECT max(to_timestamp_ntz(ts)) AS t, sum(n) AS n FROM parts")
    csv = job("csv", "SELECT sum(n) AS n FROM parts", output_format="csv")
    for st in (rows, ntz, csv):
        assert output_by(st) == "spark"
    ntz_row = spark_session.read.parquet(str(tmp_path / "ntz")).collect()
    assert [r.n for r in ntz_row] == [120]
    # A struct with a field name twice: Arrow cannot carry it (toArrow() fails), Spark writes
    # it (and would not read it back: its reader refuses the name twice).
    nested = job("nested", "SELECT named_struct('a', sum(n), 'a', sum(total)) AS s FROM parts")
    assert output_by(nested) == "spark"
    assert nested.manifest is not None and nested.manifest["rows_out"] == 1
    twice = job("twice", "SELECT sum(n) AS n, sum(total) AS N FROM parts")
    assert twice.state == "failed"
    assert "already exists" in " ".join(twice.failures), twice.failures
    assert not (tmp_path / "twice").exists()


def test_a_big_result_leaves_the_later_chunks_to_spark_and_a_row_query_never_returns(
    dq: Queue, spark_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first result over the limit is still written (it is here), but the job's later
    chunks let Spark write their parts; a query that does not aggregate, or a job without a
    combine step (whose parts are its output), always lets Spark write them."""
    from core.pipeline import chunk as chunk_step

    src = typed_input(tmp_path)
    monkeypatch.setattr(chunk_step, "RETURNED_ROWS", 2)
    big = run_job(dq, spec_for(tmp_path, src, sql=TYPED_SQL, combine_sql=TYPED_COMBINE,
                               chunks=4, output=str(tmp_path / "big")))
    assert sorted(written_by(big)) == ["spark", "spark", "spark", "worker"]
    assert big.manifest is not None and big.manifest["rows_out"] == 3
    rows = run_job(dq, spec_for(tmp_path, src, sql="SELECT id, s FROM chunk WHERE i8 = 1",
                                combine_sql="SELECT count(*) AS n FROM parts", chunks=2,
                                output=str(tmp_path / "rows")))
    assert written_by(rows) == ["spark", "spark"]
    assert [c["rows_out"] for c in rows.manifest["chunks"]] == [20, 20]  # type: ignore[index]
    alone = run_job(dq, spec_for(tmp_path, src, sql=TYPED_SQL, chunks=2,
                                 output=str(tmp_path / "alone")))
    assert written_by(alone) == ["spark", "spark"]
    assert alone.manifest is not None and alone.manifest["rows_out"] == 6
    assert spark_session.read.parquet(str(tmp_path / "alone")).count() == 6


def test_fetch_arrow_gives_what_to_arrow_gives_with_the_schema(spark_session: Any) -> None:
    """One round trip on Spark Connect (no schema asked first), the same table as toArrow():
    every type footer_frame() knows, nulls, nested columns; an empty result too. What Arrow
    cannot carry raises NotArrow, for the caller to let Spark write it."""
    frame = spark_session.createDataFrame(typed_table())
    for df in (frame, frame.where("false")):
        table, schema = spark_query.fetch_arrow(df)
        assert schema == df.schema
        assert table.equals(df.toArrow())
    assert spark_query.fetch_arrow(frame)[0].num_rows == 3
    with pytest.raises(spark_query.NotArrow, match="a"):  # toArrow() fails on it too
        spark_query.fetch_arrow(spark_session.sql("SELECT named_struct('a', 1, 'a', 2) AS s"))


def test_arrow_safe_types_are_those_spark_reads_back_unchanged() -> None:
    from pyspark.sql import types as T

    safe = T.StructType([
        T.StructField("a", T.ArrayType(T.MapType(T.StringType(), T.DecimalType(10, 2)))),
        T.StructField("t", T.TimestampType()), T.StructField("d", T.DateType()),
        T.StructField("s", T.StructType([T.StructField("x", T.ByteType())]))])
    assert io.arrow_safe(safe)
    for unsafe in (T.TimestampNTZType(), T.NullType(), T.DayTimeIntervalType(),
                   T.YearMonthIntervalType(), T.ArrayType(T.TimestampNTZType())):
        assert not io.arrow_safe(T.StructType([T.StructField("x", unsafe)])), unsafe


def test_a_result_the_server_refuses_to_send_is_written_by_spark(
    dq: Queue, spark_session: Any, tmp_path: Path
) -> None:
    """An aggregate whose result is over the server's spark.driver.maxResultSize (4 MiB on
    the tests' server): Spark refuses to send it, the chunk lets Spark write its part, and the
    job's later chunks go to Spark without asking."""
    n = 400_000
    src = tmp_path / "wide.parquet"
    pq.write_table(pa.table({"id": pa.array(range(n), pa.int64()),
                             "name": pa.array([f"name-{i:016d}" for i in range(n)])}),
                   src, row_group_size=n // 4)
    st = run_job(dq, spec_for(
        tmp_path, src, sql="SELECT id, first(name) AS name, count(*) AS c FROM chunk GROUP BY id",
        combine_sql="SELECT count(*) AS n, sum(c) AS c FROM parts", chunks=2))
    assert written_by(st) == ["spark", "spark"]
    assert jobs.records(dq).get(st.job_id, "parts_big") == "1"
    assert st.manifest is not None
    assert [c["rows_out"] for c in st.manifest["chunks"]] == [n // 2, n // 2]
    out = spark_session.read.parquet(st.manifest["output"]).collect()
    assert [(r.n, r.c) for r in out] == [(n, n)]

"""core.pipeline.jvm: the Slices data source, built into a jar and loaded by a real Spark
Connect server (--jars: the run's server), reads row groups of a Parquet file and byte ranges
of a text file straight from the file: over consecutive slices every row comes back exactly
once, with the rows and types spark.read.parquet gives, and a bad slice is a clear error
naming it."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.errors import IllegalArgumentException

from core.pipeline import jvm

pytestmark = pytest.mark.slow

ROWS = 3000
GROUP_ROWS = 250  # 12 row groups
GROUPS = ROWS // GROUP_ROWS


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jar(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return jvm.build(tmp_path_factory.mktemp("jars"))


@pytest.fixture
def spark(spark_session: Any) -> Any:
    """A Spark Connect session on the run's server, which has the project's jar (built from
    the same sources into the suite's jar folder; the `jar` fixture's is another copy)."""
    return spark_session


def table(rows: int = ROWS) -> pa.Table:
    """int64, double with nulls, strings, timestamp[us, tz=UTC], date, boolean."""
    start = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    return pa.table({
        "id": pa.array(range(rows), pa.int64()),
        "x": pa.array([None if i % 7 == 0 else i * 0.25 for i in range(rows)], pa.float64()),
        "s": pa.array([None if i % 11 == 0 else "é" * (i % 5) + str(i) for i in range(rows)],
                      pa.string()),
        "ts": pa.array([start + dt.timedelta(minutes=37 * i, microseconds=i) for i in range(rows)],
                       pa.timestamp("us", tz="UTC")),
        "d": pa.array([dt.date(1990, 1, 1) + dt.timedelta(days=i) for i in range(rows)],
                      pa.date32()),
        "b": pa.array([None if i % 13 == 0 else i % 3 == 0 for i in range(rows)], pa.bool_()),
    })


@pytest.fixture(scope="module")
def parquet_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("parquet") / "t.parquet"
    pq.write_table(table(), path, row_group_size=GROUP_ROWS)
    assert pq.ParquetFile(path).metadata.num_row_groups == GROUPS
    return path


def reference(path: Path, groups: list[int]) -> pd.DataFrame:
    """pyarrow's reading of these row groups, timestamps as epoch microseconds and dates as
    epoch days (instants, free of any time zone), in the columns `comparable` selects."""
    t = pq.ParquetFile(path).read_row_groups(groups)
    return pd.DataFrame({
        "id": t["id"].to_pylist(), "x": t["x"].to_pylist(), "s": t["s"].to_pylist(),
        "ts": t["ts"].cast(pa.int64()).to_pylist(), "d": t["d"].cast(pa.int32()).to_pylist(),
        "b": t["b"].to_pylist(),
    })


def comparable(df: Any) -> pd.DataFrame:
    """A Spark frame of the table's columns as plain Python values (see reference)."""
    out = df.selectExpr("id", "x", "s", "unix_micros(ts) AS ts", "unix_date(d) AS d", "b")
    rows = [r.asDict() for r in out.collect()]
    return pd.DataFrame(rows, columns=["id", "x", "s", "ts", "d", "b"])


def same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal frames, None and NaN alike (nulls as pyarrow/Spark give them)."""
    assert len(a) == len(b)
    for column in a.columns:
        left = [None if v is None or v != v else v for v in a[column]]
        right = [None if v is None or v != v else v for v in b[column]]
        assert left == right, column


def slices_df(spark: Any, fmt: str, slices: list[tuple[Any, int, int]], **options: Any) -> Any:
    reader = (spark.read.format(jvm.FORMAT).option("format", fmt)
              .option("slices", json.dumps([[str(p), a, b] for p, a, b in slices])))
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def error_of(action: Callable[[], object]) -> str:
    """The message of the IllegalArgumentException `action` raises (from the server)."""
    with pytest.raises(IllegalArgumentException) as caught:
        action()
    return str(caught.value)


# -- the jar -------------------------------------------------------------------------------


def test_the_jar_is_named_by_sources_and_spark_and_reused(
    jar: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.metadata

    assert jar.name == jvm.jar_name()
    assert jvm.ensure_jar(jar.parent) == jar  # there already: not rebuilt
    real_version = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: "9.9.9" if name == "pyspark" else real_version(name))
    assert jvm.jar_name() != jar.name
    src = tmp_path / "src"
    (src / "p").mkdir(parents=True)
    (src / "p" / "A.java").write_text("package p; public class A {}\n")
    monkeypatch.setattr(jvm, "SOURCE_DIR", src)
    name = jvm.jar_name()
    (src / "p" / "A.java").write_text("package p; public class A { int x; }\n")
    assert jvm.jar_name() != name


def test_no_javac_or_a_compile_error_is_a_jar_build_error_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "src"
    (src / "p").mkdir(parents=True)
    (src / "p" / "A.java").write_text("package p; public class A { int x = nope; }\n")
    monkeypatch.setattr(jvm, "SOURCE_DIR", src)
    with pytest.raises(jvm.JarBuildError, match=r"(?s)javac failed.*A\.java.*nope"):
        jvm.build(tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []  # no jar, no leftovers

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(jvm.JarBuildError, match="apt-get install openjdk-17-jdk-headless"):
        jvm.build(tmp_path / "out")


# -- Parquet -------------------------------------------------------------------------------


@pytest.mark.parametrize("cuts", [
    [0, GROUPS],  # one slice: the whole file
    [0, 1, GROUPS],  # a slice of one row group first
    [0, 5, 6, 11, GROUPS],
    list(range(GROUPS + 1)),  # each row group alone
], ids=["whole", "one-then-rest", "mixed", "each"])
def test_consecutive_slices_give_every_row_once_in_order(
    spark: Any, parquet_file: Path, cuts: list[int]
) -> None:
    slices = [(parquet_file, a, b) for a, b in itertools.pairwise(cuts)]
    # partitionBytes so small that each row group is a partition of its own, and the default.
    for options in ({}, {"partitionBytes": 1}):
        ids = [r.id for r in slices_df(spark, "parquet", slices, **options).select("id").collect()]
        assert ids == list(range(ROWS)), options


def test_slices_come_in_slice_order_and_a_big_slice_is_several_partitions(
    spark: Any, parquet_file: Path
) -> None:
    size = parquet_file.stat().st_size
    df = slices_df(spark, "parquet", [(parquet_file, 8, GROUPS), (parquet_file, 0, 8)],
                   partitionBytes=size // 4)
    ids = [r.id for r in df.select("id").collect()]
    assert ids == list(range(8 * GROUP_ROWS, ROWS)) + list(range(8 * GROUP_ROWS))
    # Partitions: several per slice, each of whole row groups.
    from pyspark.sql import functions as F

    counts = sorted(r["count"] for r in df.groupBy(F.spark_partition_id()).count().collect())
    assert len(counts) >= 4
    assert all(c % GROUP_ROWS == 0 for c in counts)
    assert sum(counts) == ROWS


@pytest.mark.parametrize("partitions", [1, 3, 100])
def test_partitions_cut_the_whole_read_into_about_that_many(
    spark: Any, parquet_file: Path, partitions: int
) -> None:
    # Two slices, each cut on its own: at least one partition each, at most one more than asked
    # for (a rounding in each slice), never more than row groups; rows in order.
    df = jvm.read_parquet_groups(spark, [(str(parquet_file), 0, 4), (str(parquet_file), 4,
                                                                       GROUPS)],
                                 partitions=partitions)
    from pyspark.sql import functions as F

    counts = sorted(r["count"] for r in df.groupBy(F.spark_partition_id()).count().collect())
    assert max(2, min(partitions, GROUPS)) <= len(counts) <= min(GROUPS, partitions + 1)
    assert all(c % GROUP_ROWS == 0 for c in counts)
    assert [r.id for r in df.select("id").collect()] == list(range(ROWS))


def test_partitions_must_be_a_positive_number(spark: Any, parquet_file: Path) -> None:
    for bad in ("0", "-2"):
        assert "Slices: partitions must be > 0" in error_of(
            slices_df(spark, "parquet", [(parquet_file, 0, 1)], partitions=bad).collect)


def test_the_same_rows_and_types_as_spark_read_parquet(spark: Any, parquet_file: Path) -> None:
    native = spark.read.parquet(str(parquet_file))
    df = jvm.read_parquet_groups(spark, [(str(parquet_file), 3, 7)])
    assert df.schema == native.schema
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "bigint", "double", "string", "timestamp", "date", "boolean"]
    rows = range(3 * GROUP_ROWS, 7 * GROUP_ROWS)
    want = native.where(f"id >= {rows.start} AND id < {rows.stop}").orderBy("id")
    assert df.collect() == want.collect()  # timestamps as the same instants, dates alike
    same(comparable(df), reference(parquet_file, [3, 4, 5, 6]))
    assert df.count() == len(rows)  # no column at all read


def test_column_pruning_reads_only_the_selected_columns(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # A list column the vectorized reader cannot read once nested vectors are off: selecting
    # around it works only if the scan is pruned to the two columns asked for.
    path = tmp_path_factory.mktemp("nested") / "n.parquet"
    t = table(600).append_column("tags", pa.array([[i, i + 1] for i in range(600)]))
    pq.write_table(t, path, row_group_size=100)
    spark.conf.set("spark.sql.parquet.enableNestedColumnVectorizedReader", "false")
    try:
        df = jvm.read_parquet_groups(spark, [(str(path), 2, 4)])
        assert len(df.columns) == 7
        got = [(r.s, r.id) for r in df.select("s", "id").collect()]
        want = list(zip(t["s"].to_pylist(), t["id"].to_pylist(), strict=True))[200:400]
        assert got == want
        assert "column `tags` (array<bigint>) cannot be read" in error_of(
            df.select("id", "tags").collect)
    finally:
        spark.conf.unset("spark.sql.parquet.enableNestedColumnVectorizedReader")


def test_a_bad_row_group_range_or_a_missing_file_is_a_clear_error(
    spark: Any, parquet_file: Path, tmp_path: Path
) -> None:
    def groups(*pieces: tuple[Path, int, int]) -> Callable[[], object]:
        return jvm.read_parquet_groups(spark, [(str(p), a, b) for p, a, b in pieces]).collect

    assert (f"row groups [10, 13) of {parquet_file} is out of range: the file has 12 row "
            "groups [0, 12)") in error_of(groups((parquet_file, 10, 13)))
    assert f"row groups [-1, 2) of {parquet_file} is out of range" in error_of(
        groups((parquet_file, -1, 2)))
    missing = tmp_path / "missing.parquet"
    assert f"row groups [0, 1) of {missing}: file not found" in error_of(
        groups((parquet_file, 0, 1), (missing, 0, 1)))
    assert f"row groups [0, 1) of {missing}: file not found" in error_of(
        groups((missing, 0, 1)))  # the first file: at schema inference
    empty = spark.read.format(jvm.FORMAT).option("format", "parquet").option("slices", "[]")
    assert "option slices must be a non-empty JSON list" in error_of(lambda: empty.load().columns)


def test_a_file_written_again_is_read_again_not_from_the_footer_kept(
    spark: Any, tmp_path: Path
) -> None:
    """The driver keeps the footers it read (a job's chunks read one file's), under the file's
    length and modification time: a file written again, with other row groups, is read as it
    is now, schema included."""
    path = tmp_path / "again.parquet"
    pq.write_table(pa.table({"x": list(range(30))}), path, row_group_size=10)
    first = jvm.read_parquet_groups(spark, [(str(path), 1, 3)])
    assert sorted(r.x for r in first.collect()) == list(range(10, 30))
    assert sorted(r.x for r in jvm.read_parquet_groups(
        spark, [(str(path), 0, 1)]).collect()) == list(range(10))  # the kept footer
    pq.write_table(pa.table({"y": [f"v{i}" for i in range(40)]}), path, row_group_size=20)
    again = jvm.read_parquet_groups(spark, [(str(path), 1, 2)])
    assert again.columns == ["y"]
    assert sorted(r.y for r in again.collect()) == sorted(f"v{i}" for i in range(20, 40))
    assert "the file has 2 row groups" in error_of(
        jvm.read_parquet_groups(spark, [(str(path), 1, 3)]).collect)


# -- text ----------------------------------------------------------------------------------


def lines_text(count: int, *, seed: int, crlf: bool = False) -> tuple[list[str], bytes]:
    """Lines of 0 to ~40 characters (some empty, some non-ASCII), the last without a line end."""
    rng = random.Random(seed)
    lines = [f"{i}," + "".join(rng.choice("abcé ,;") for _ in range(rng.randrange(0, 40)))
             if i % 9 else "" for i in range(count)]
    end = "\r\n" if crlf else "\n"
    return lines, end.join(lines).encode()


def read_lines(spark: Any, slices: list[tuple[Any, int, int]], **options: Any) -> list[str]:
    return [r.value for r in slices_df(spark, "text", slices, **options).collect()]


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
def test_text_ranges_at_any_byte_boundaries_give_every_line_once(
    spark: Any, tmp_path: Path, crlf: bool
) -> None:
    lines, data = lines_text(16, seed=7, crlf=crlf)
    path = tmp_path / "t.txt"
    path.write_bytes(data)
    size = len(data)
    rng = random.Random(3)
    for _ in range(3):
        cuts = sorted({0, size, *(rng.randrange(1, size) for _ in range(12))})
        slices = [(path, a, b) for a, b in itertools.pairwise(cuts)]
        assert read_lines(spark, slices) == lines, cuts
    # Partitions of 1 byte: every byte position is a boundary (one task each: a small file).
    for step in (1, 4):
        assert read_lines(spark, [(path, 0, size)], partitionBytes=step) == lines, step
    for n in (1, 3, 500):  # the whole read in about n partitions, cut at any byte
        assert read_lines(spark, [(path, 0, size // 3), (path, size // 3, size)],
                          partitions=n) == lines, n
    # A range has the lines whose first byte is in it, read whole: one byte at a line's start
    # gives that line (an empty line too), a range from just after it to the next line's start
    # none, and an empty range none.
    end = b"\r\n" if crlf else b"\n"
    starts = list(itertools.accumulate((len(x.encode()) + len(end) for x in lines), initial=0))
    for k in (0, 1, 9, 10, len(lines) - 1):
        assert read_lines(spark, [(path, starts[k], starts[k] + 1)]) == [lines[k]], k
        assert read_lines(spark, [(path, starts[k] + 1, min(starts[k + 1], size))]) == [], k
    assert read_lines(spark, [(path, starts[2], starts[5])]) == lines[2:5]
    assert read_lines(spark, [(path, 5, 5)]) == []


def test_skip_header_drops_the_files_first_line_only(spark: Any, tmp_path: Path) -> None:
    lines, data = lines_text(50, seed=11)
    data = b"h1,h2\n" + data
    path = tmp_path / "h.csv"
    path.write_bytes(data)
    for cut in (1, 6, 7, 300):
        got = read_lines(spark, [(path, 0, cut), (path, cut, len(data))], skipHeader="true")
        assert got == lines, cut
    assert read_lines(spark, [(path, 0, len(data))], skipHeader="true", partitionBytes=2) == lines
    # Not skipped without the option, nor in a range that does not start at byte 0.
    assert read_lines(spark, [(path, 0, len(data))]) == ["h1,h2", *lines]
    assert read_lines(spark, [(path, 6, len(data))], skipHeader="true") == lines
    df = jvm.read_text_ranges(spark, [(str(path), 0, len(data))], skip_header=True)
    assert df.columns == ["value"]
    assert df.count() == len(lines)


def test_a_bad_byte_range_or_a_missing_text_file_is_a_clear_error(
    spark: Any, tmp_path: Path
) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\nb\n")
    ranges = [(str(path), 0, 2), (str(path), 2, 9)]
    assert f"bytes [2, 9) of {path} is out of range: the file has 4 bytes" in error_of(
        jvm.read_text_ranges(spark, ranges, skip_header=False).collect)
    missing = tmp_path / "nope.csv"
    assert f"bytes [0, 4) of {missing}: file not found" in error_of(
        jvm.read_text_ranges(spark, [(str(missing), 0, 4)], skip_header=False).collect)

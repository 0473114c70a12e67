"""Reading a job's input and views, and writing directories so that a reader (or a retry)
never sees half of one: write to a temporary directory beside the target, then rename."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import DataJobError
from .roots import GLOB_CHARS
from .spec import JobSpec, view_format

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from .plan import InputFile


def reader_for(session: SparkSession, fmt: str) -> object:
    """A DataFrameReader for `fmt`: CSV with a header line and inferred types; CSV and JSON
    lines fail on a malformed record (FAILFAST) instead of turning it into nulls."""
    r = session.read.format(fmt)
    if fmt == "csv":
        r = r.option("header", "true").option("inferSchema", "true").option("mode", "FAILFAST")
    elif fmt == "json":
        r = r.option("mode", "FAILFAST")
    return r


def read(session: SparkSession, path: str, fmt: str) -> DataFrame:
    return reader_for(session, fmt).load(path)  # type: ignore[attr-defined, no-any-return]


def read_input(session: SparkSession, spec: JobSpec, files: list[str] | None = None, *,
               base: str | None = None, schema: StructType | None = None) -> DataFrame:
    """The job's input, or only `files` of it (whose `name=value` folders under `base` give
    columns); `schema` spares a CSV or JSON input Spark's inference (the split's)."""
    if files is not None:
        _literal(files)
    r: Any = reader_for(session, spec.format)
    if base is not None:
        r = r.option("basePath", base)
    if schema is not None:
        r = r.schema(schema)
    return r.load(files if files is not None else spec.input)  # type: ignore[no-any-return]


def _literal(files: list[str]) -> None:
    """Refuse to give Spark, by name, a file whose name it would read as a pattern: the
    split's listing was taken after the job's paths were checked (roots.check_input refuses
    such names in an input), and a name like `{.,x/}.` would be expanded to `..`."""
    bad = next((f for f in files if GLOB_CHARS & set(f)), None)
    if bad is not None:
        raise DataJobError(f"the input holds {bad}, whose name Spark would read as a pattern "
                           "(Hadoop's glob: { } [ ] * ? \\): rename it, or move it out of the "
                           "input", permanent=True)


SMALL_PARTS_BYTES = 2 * 1024 * 1024  # parts up to this size on disk go to Spark in the plan


def footer_frame(session: SparkSession, footers: list[InputFile]) -> DataFrame | None:
    """An empty frame with the columns Spark reads from Parquet files, made from their
    footers (plan.read_footers()) alone: Spark then neither lists nor opens them (a split's
    analysis of a 40M-row file: 0.27 s read by Spark, 0.13 s this way, measured on the stack's
    server). None when the files' schemas differ or hold a type that Spark reads by its
    settings or otherwise than Arrow says (INT96, a timestamp without a zone, unsigned
    integers, ...): the caller lets Spark read them."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import from_arrow_schema

    if not footers or any(f.schema is None or f.int96 for f in footers):
        return None
    arrow = footers[0].schema
    if not all(_plain_type(f.type) for f in arrow) or any(
            not f.schema.equals(arrow) for f in footers[1:]):
        return None
    try:
        schema = from_arrow_schema(arrow, prefer_timestamp_ntz=False)
    except (ValueError, TypeError, NotImplementedError, pa.ArrowException):
        return None
    return session.createDataFrame([], schema)


def _plain_type(t: Any) -> bool:
    """An Arrow type that maps to one Spark type whatever Spark's settings say."""
    import pyarrow as pa

    p = pa.types
    if p.is_list(t) or p.is_large_list(t):
        return _plain_type(t.value_type)
    if p.is_struct(t):
        return all(_plain_type(t.field(i).type) for i in range(t.num_fields))
    if p.is_map(t):
        return _plain_type(t.key_type) and _plain_type(t.item_type)
    if p.is_timestamp(t):
        return t.tz is not None and t.unit in ("ms", "us")
    if p.is_decimal(t):
        return bool(t.precision <= 38)
    return bool(p.is_boolean(t) or p.is_signed_integer(t) or p.is_float32(t)
                or p.is_float64(t) or p.is_string(t) or p.is_binary(t) or p.is_date32(t))


def small_parts_frame(session: SparkSession, dirs: list[Path],
                      schema: StructType) -> DataFrame | None:
    """The chunks' Parquet parts in `dirs`, read here and sent to Spark in the plan, cast to
    `schema` (the split's analysis), when they take at most SMALL_PARTS_BYTES (an aggregate's
    few hundred rows): the combine's Spark job then has no files to list and scan (0.46 s ->
    0.32 s for two parts of 185 rows). None when they are larger or do not read as `schema`
    says: the caller lets Spark read them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = [f for d in dirs for f in data_files(d)]
    if sum(f.stat().st_size for f in files) > SMALL_PARTS_BYTES:
        return None
    try:
        tables = [pq.read_table(f) for f in files]
        if not tables or len(tables[0].schema) != len(schema.fields):
            return None
        table = pa.concat_tables(tables)
        return session.createDataFrame(table, schema)
    except (OSError, ValueError, TypeError, pa.ArrowException):
        return None


def parse_lines(lines: DataFrame, fmt: str, schema: StructType) -> DataFrame:
    """Lines of CSV or JSON (a column `value`) as rows of `schema`, parsed by Spark's own
    parsers with the options its reader uses (a malformed record fails, FAILFAST); blank lines
    are skipped, as the readers skip them."""
    from pyspark.sql import functions as F

    options = {"mode": "FAILFAST"}
    value = F.col("value")
    parse = (F.from_csv(value, schema.simpleString(), options) if fmt == "csv"
             else F.from_json(value, schema, options))
    rows = lines.where(F.trim(value) != "").select(parse.alias("r"))
    return rows.select(*(F.col("r").getField(f.name).alias(f.name) for f in schema.fields))


def view_frames(session: SparkSession, spec: JobSpec) -> dict[str, DataFrame]:
    """The job's --view tables, by name (read lazily)."""
    return {name: read(session, path, view_format(path)) for name, path in spec.views.items()}


def register_views(session: SparkSession, spec: JobSpec) -> None:
    """The job's --view tables, as temporary views of `session` (a task's own session)."""
    for name, frame in view_frames(session, spec).items():
        frame.createOrReplaceTempView(name)


def write(df: DataFrame, path: Path, fmt: str, *, one_file: bool = True,
          partition_by: list[str] | None = None) -> None:
    """`df` in `fmt` under the directory `path`, overwritten: as one file (coalesce(1): the
    combine step's output; one per partition folder with `partition_by`), or as Spark's tasks
    write it (a chunk's part: coalescing would run a chunk's whole scan in one task, on one
    core); with `partition_by`, in Hive-style folders `COL=value/` of those columns."""
    w = (df.coalesce(1) if one_file else df).write.mode("overwrite").format(fmt)
    if partition_by:
        w = w.partitionBy(*partition_by)
    if fmt == "csv":
        w = w.option("header", "true")
    w.save(str(path))


def parquet_rows(directory: Path) -> int:
    """The rows of the Parquet files Spark wrote in `directory`, from their footers."""
    import pyarrow.parquet as pq

    return sum(pq.read_metadata(f).num_rows for f in tree_files(directory))


def write_arrow(table: Any, directory: Path) -> None:
    """An Arrow table as the one Parquet file of the new directory `directory`: a chunk's
    part that came back to its worker (the combine reads it as the parts' schema says), or a
    small combine's output (combine._combined_here)."""
    import pyarrow.parquet as pq

    directory.mkdir()
    pq.write_table(table, directory / "part-00000.snappy.parquet", compression="snappy")


def arrow_safe(schema: StructType) -> bool:
    """Every column of `schema` goes through Arrow and Parquet and is read back by Spark as
    the same type (no timestamp without a zone, interval, void or variant)."""
    from pyspark.sql import types as T

    def safe(t: Any) -> bool:
        if isinstance(t, T.ArrayType):
            return safe(t.elementType)
        if isinstance(t, T.MapType):
            return safe(t.keyType) and safe(t.valueType)
        if isinstance(t, T.StructType):
            return all(safe(f.dataType) for f in t.fields)
        return isinstance(t, T.StringType | T.BooleanType | T.ByteType | T.ShortType
                          | T.IntegerType | T.LongType | T.FloatType | T.DoubleType
                          | T.DecimalType | T.BinaryType | T.DateType | T.TimestampType)

    return safe(schema)


def temp_beside(target: Path) -> Path:
    return target.parent / f".tmp-{target.name}-{uuid.uuid4().hex[:8]}"


def replace_dir(tmp: Path, target: Path) -> None:
    """Put the directory `tmp` in place of `target` (which may exist): two renames, so a
    reader sees the old or the new one; a crash between them leaves no target, which the
    task's retry writes again."""
    old = None
    if target.exists():
        old = target.parent / f".old-{target.name}-{uuid.uuid4().hex[:8]}"
        os.rename(target, old)
    os.rename(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def data_files(directory: Path) -> list[Path]:
    """The data files Spark wrote in `directory` (not its checksums or markers)."""
    return sorted(p for p in directory.iterdir()
                  if p.is_file() and not p.name.startswith((".", "_")))


def tree_files(directory: Path) -> list[Path]:
    """The data files Spark wrote in `directory` and its partition folders (`COL=value/`),
    in a stable order; hidden and `_` names skipped, as readers skip them."""
    out: list[Path] = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        out += [Path(root, n) for n in sorted(names) if not n.startswith((".", "_"))]
    return out

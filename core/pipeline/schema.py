"""An input's columns from its files' metadata, without Spark: a Parquet footer (pyarrow), a
CSV header line, the first lines of a JSON-lines file. `datajob submit` and the console check a
job's SQL against them (sqlcheck) in milliseconds, where a Spark session took 5-10 s to start.

Types are given in Spark's DDL words (BIGINT, STRUCT<a: INT>) for the SQL checker, which needs
them only to follow a struct's fields; a CSV's columns are strings here (Spark infers their
types when it reads the data), as a JSON column is whatever its first lines say.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .spec import SpecError, _matches, is_local, local_path

if TYPE_CHECKING:
    import pyarrow as pa

SAMPLE_LINES = 1000  # JSON lines read to find the columns
Columns = dict[str, str]  # name -> Spark type, in the input's order


def first_file(path: str) -> tuple[str, dict[str, str]] | None:
    """The first data file (sorted) of a file, directory or glob, and the partition columns
    its folder names give (`month=1/part-0.parquet` -> {"month": "1"}); None if no file."""
    for match in sorted(_matches(local_path(path))):
        p = Path(match)
        if p.is_file():
            return str(p), {}
        for root, dirs, names in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
            files = sorted(n for n in names if not n.startswith((".", "_")))
            if files:
                rel = Path(root).relative_to(p).parts
                parts = dict(x.split("=", 1) for x in rel if "=" in x)
                return os.path.join(root, files[0]), parts
    return None


VIEW_HINT = "a --view's format comes from its name: .csv, .json, else Parquet"


def columns_of(path: str, fmt: str, *, view: bool = False) -> Columns | None:
    """The columns of an input (or, with `view`, a --view) from its metadata; None when its
    files cannot be read from here (a remote path). SpecError for a file that is not in the
    format given."""
    if not is_local(path):
        return None
    found = first_file(path)
    if found is None:
        raise SpecError(f"{path}: no data file found")
    file, partitions = found
    _sniff(file, fmt, view)
    try:
        cols = (_parquet(file) if fmt == "parquet" else _csv(file) if fmt == "csv"
                else _json(file))
    except (OSError, ValueError) as exc:
        raise SpecError(f"{file}: cannot read its columns as {fmt}: "
                        f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__} "
                        "(is --format right?)") from None
    for key, value in partitions.items():
        cols.setdefault(key, "BIGINT" if value.lstrip("-").isdigit() else "STRING")
    if not cols:
        raise SpecError(f"{file}: no columns found (an empty file, or not {fmt}?)")
    return cols


def _sniff(file: str, fmt: str, view: bool) -> None:
    """SpecError for a file that is plainly not in `fmt`, by its first bytes: a Parquet file
    given as CSV or JSON (read as text, its bytes made a header of binary junk, named to the
    user as its columns), other binary data given as text, or text given as Parquet (pyarrow
    said only "Parquet magic bytes not found")."""
    try:
        with open(file, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return  # said below, by the read of its columns
    parquet, binary = head.startswith(b"PAR1"), b"\x00" in head
    if fmt == "parquet":
        if head and not parquet and not binary:
            raise SpecError(f"{file} is text, not Parquet "
                            f"({VIEW_HINT if view else 'give --format csv or --format json'})")
    elif parquet:
        raise SpecError(f"{file} is a Parquet file, not {fmt} "
                        f"({VIEW_HINT if view else 'give --format parquet'})")
    elif binary:
        raise SpecError(f"{file} is not text (it holds NUL bytes), so not {fmt}: is "
                        f"{'its name' if view else '--format'} right?")


def _parquet(file: str) -> Columns:
    import pyarrow.parquet as pq

    return {f.name: spark_type(f.type) for f in pq.read_schema(file)}


def _csv(file: str) -> Columns:
    with open(file, encoding="utf-8", errors="replace", newline="") as fh:
        header = next(csv.reader(fh), [])
    # As Spark names them: an empty header cell becomes _c<index>.
    return {(name or f"_c{i}"): "STRING" for i, name in enumerate(header)}


def _json(file: str) -> Columns:
    with open(file, encoding="utf-8", errors="replace") as fh:
        lines = [ln for ln in itertools.islice(fh, SAMPLE_LINES) if ln.strip()]
    try:
        import pyarrow.json as pj

        table = pj.read_json(io.BytesIO("".join(lines).encode()))
        return {f.name: spark_type(f.type) for f in table.schema}
    except Exception:
        cols: Columns = {}
        for ln in lines:
            record: Any = json.loads(ln)
            if isinstance(record, dict):
                for key in record:
                    cols.setdefault(str(key), "STRING")
        return cols


def spark_type(t: pa.DataType) -> str:
    """A pyarrow type in Spark's DDL words (close enough for resolving columns and fields)."""
    import pyarrow as pa

    simple = [(pa.types.is_boolean, "BOOLEAN"), (pa.types.is_int8, "TINYINT"),
              (pa.types.is_int16, "SMALLINT"), (pa.types.is_int32, "INT"),
              (pa.types.is_integer, "BIGINT"), (pa.types.is_float32, "FLOAT"),
              (pa.types.is_floating, "DOUBLE"), (pa.types.is_date, "DATE"),
              (pa.types.is_timestamp, "TIMESTAMP"), (pa.types.is_binary, "BINARY"),
              (pa.types.is_large_binary, "BINARY")]
    for test, name in simple:
        if test(t):
            return name
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision}, {t.scale})"
    if pa.types.is_struct(t):
        fields = ", ".join(f"`{f.name.replace('`', '``')}`: {spark_type(f.type)}" for f in t)
        return f"STRUCT<{fields}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"ARRAY<{spark_type(t.value_type)}>"
    if pa.types.is_map(t):
        return f"MAP<{spark_type(t.key_type)}, {spark_type(t.item_type)}>"
    return "STRING"

"""The checks that need Spark, run by `datajob submit` before anything is queued: the SQL
(or transform) and the combine SQL are analysed against the input's schema, on empty frames
of that schema, so a statement that does not parse or names a missing column is refused with
Spark's own parser and analyser (the workers' own), and no data is read.

Why in the submitting process, on a small local session, rather than in a first task: the
answer comes before anything is queued and needs no worker running; a schema costs a Parquet
footer, a CSV header line or the first lines of a JSON file to read.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from . import transforms
from .errors import explain
from .io import read
from .spec import JobSpec, SpecError, _matches, is_local, view_format

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

SAMPLE_LINES = 1000  # JSON lines read to infer a schema


def schema_of(session: SparkSession, path: str, fmt: str) -> StructType:
    """The schema of a dataset, cheaply: Parquet from its footers, CSV from its header line
    (columns as strings), JSON lines from its first lines."""
    if fmt == "csv":
        return session.read.option("header", "true").csv(path).schema
    if fmt == "json" and is_local(path):
        first = sorted(_matches(path))
        lines: list[str] = []
        for f in first:
            p = Path(f)
            files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p]
            for x in files:
                if x.name.startswith((".", "_")):
                    continue
                with open(x, encoding="utf-8", errors="replace") as fh:
                    lines += [ln for ln in itertools.islice(fh, SAMPLE_LINES) if ln.strip()]
                if len(lines) >= SAMPLE_LINES:
                    break
            if len(lines) >= SAMPLE_LINES:
                break
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as tmp:
            tmp.write("\n".join(lines))
        try:
            return session.read.json(tmp.name).schema
        finally:
            Path(tmp.name).unlink()
    return read(session, path, fmt).schema


def _empty(session: SparkSession, schema: StructType) -> DataFrame:
    return session.createDataFrame([], schema)


def check_with_spark(session: SparkSession, spec: JobSpec) -> list[str]:
    """Analyse the job's statements against empty frames of the input's schema; SpecError
    saying what to change. Returns the columns the chunk step produces."""
    s = session.newSession()
    try:
        schema = schema_of(s, spec.input, spec.format)
    except Exception as exc:
        raise SpecError(explain(exc, where=f"input {spec.input}")) from exc
    if not schema.fields:
        raise SpecError(f"input {spec.input}: no columns found (empty file, or not "
                        f"{spec.format}?)")
    for name, path in spec.views.items():
        try:
            _empty(s, schema_of(s, path, view_format(path))).createOrReplaceTempView(name)
        except Exception as exc:
            raise SpecError(explain(exc, where=f"--view {name}={path}")) from exc
    chunk = _empty(s, schema)
    chunk.createOrReplaceTempView("chunk")
    columns = ", ".join(schema.fieldNames())
    try:
        if spec.sql is not None:
            result = s.sql(spec.sql)
        else:
            fn = transforms.get(spec.transform or "")
            assert fn is not None  # make_spec() checked it
            result = fn(chunk)
        result.schema  # noqa: B018  (analysis happens here on Spark Connect)
    except Exception as exc:
        option = "--sql" if spec.sql is not None else f"--transform {spec.transform}"
        raise SpecError(explain(exc, where="", sql_option=option)
                        + f" (the input's columns: {columns})") from exc
    if spec.combine_sql:
        _empty(s, result.schema).createOrReplaceTempView("parts")
        try:
            s.sql(spec.combine_sql).schema  # noqa: B018
        except Exception as exc:
            parts = ", ".join(result.schema.fieldNames())
            raise SpecError(explain(exc, where="", sql_option="--combine-sql")
                            + f" (the view parts has the columns: {parts})") from exc
    return list(result.schema.fieldNames())

"""Reading a job's input and views, and writing directories so that a reader (or a retry)
never sees half of one: write to a temporary directory beside the target, then rename."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from .spec import JobSpec, view_format

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


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


def read_input(session: SparkSession, spec: JobSpec) -> DataFrame:
    return read(session, spec.input, spec.format)


def register_views(session: SparkSession, spec: JobSpec) -> None:
    """The job's --view tables, as temporary views of `session` (a task's own session)."""
    for name, path in spec.views.items():
        read(session, path, view_format(path)).createOrReplaceTempView(name)


def write(df: DataFrame, path: Path, fmt: str, *, shuffle: bool = False) -> None:
    """One file in `fmt` under the directory `path`, overwritten. shuffle=True when `df` is a
    small slice of a big frame (a chunk filtered out of the whole input): repartition(1) keeps
    the scan parallel, where coalesce(1) would run it in one task."""
    one = df.repartition(1) if shuffle else df.coalesce(1)
    w = one.write.mode("overwrite").format(fmt)
    if fmt == "csv":
        w = w.option("header", "true")
    w.save(str(path))


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

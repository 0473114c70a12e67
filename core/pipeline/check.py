"""Every check a data job passes before anything is queued, and again in the worker before
each of its tasks runs (a task in Redis is not trusted either), without Spark: the options,
the paths (under the data roots: roots.py), the output (never replacing what this project did
not write), and the SQL (one query over the job's own views, allowed functions, columns the
data has: sqlcheck.py, against the columns the files' metadata give: schema.py).

What Spark alone can tell (a type mismatch, say) is found by the job's first task, the split,
which analyses the statements on the workers' Spark before any chunk is added: one task fails,
with the message, and the job stops there.
"""

from __future__ import annotations

import errno
import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.queue.errors import InvalidInput
from core.queue.keys import validate_id

from . import checkcache, schema, transforms
from . import roots as roots_
from .jobs import check_size
from .roots import DataRoots
from .spec import (
    FORMATS,
    MAX_CHUNKS,
    MAX_PARTITION_COLUMNS,
    MODES,
    OUTPUT_FORMATS,
    SUCCESS,
    JobSpec,
    SpecError,
    _matches,
    is_local,
    view_format,
    written_by,
)

if TYPE_CHECKING:
    from .sqlcheck import CheckedSQL, Schema

MAX_PATH_CHARS = 4096
MAX_NAME_CHARS = 255
# A partition column names a folder level (`COL=value/`): a plain identifier, nothing a path
# could read as a separator, a parent or a pattern.
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class Statements:
    """What Spark runs for a job: its checked chunk SQL (None: a transform) and combine SQL."""

    sql: CheckedSQL | None
    combine_sql: CheckedSQL | None


def make_spec(
    *, job_id: str, input: str, format: str, output: str, output_format: str = "parquet",
    sql: str | None = None, transform: str | None = None, combine_sql: str | None = None,
    views: dict[str, str] | None = None, chunks: int | None = None,
    rows_per_chunk: int | None = None, overwrite: bool = False,
    partition_by: list[str] | None = None, mode: str = "overwrite",
    incremental: bool = False, content_hash: bool = False,
    roots: DataRoots | None = None, input_may_be_missing: bool = False,
) -> JobSpec:
    """A spec with resolved paths, after every check: SpecError (OutsideRoots, SQLRefused)
    saying what to change. `roots` default to the settings' (QA_DATA_ROOTS,
    QA_OUTPUT_ROOTS). With `input_may_be_missing` (a schedule's input templated with a slot
    to come), a missing input is not refused, and the SQL's columns are not checked."""
    _check_options(format=format, output_format=output_format, sql=sql, transform=transform,
                   combine_sql=combine_sql, chunks=chunks, rows_per_chunk=rows_per_chunk)
    roots = roots or roots_.from_settings()
    if not is_local(output):
        raise SpecError(f"--output {output!r}: the output must be a path on a filesystem every "
                        "worker shares (its parts are moved into place by renaming)")
    for what, path in [("--input", input), ("--output", output),
                       *((f"--view {n}", p) for n, p in (views or {}).items())]:
        _check_path_text(what, path)
    spec = JobSpec(
        job_id=job_id, input=roots_.check_input(input, roots), format=format,
        output=roots_.check_output(output, roots), output_format=output_format, sql=sql,
        transform=transform, combine_sql=combine_sql,
        views={n: roots_.check_input(p, roots, what=f"--view {n}", wildcards=False)
               for n, p in (views or {}).items()},
        chunks=chunks, rows_per_chunk=rows_per_chunk, overwrite=overwrite,
        partition_by=list(partition_by or []), mode=mode, incremental=incremental,
        content_hash=content_hash,
    )
    check_layout(spec)
    missing = is_local(spec.input) and not _matches(spec.input)
    if missing and not input_may_be_missing:
        raise SpecError(f"input {input!r} does not exist"
                        + (" (the pattern matches no file)" if glob.has_magic(input) else ""))
    for name, path in spec.views.items():
        if is_local(path) and not _matches(path):
            raise SpecError(f"--view {name}={path}: no such file or directory")
    for what, path in [("--input", spec.input), *((f"--view {n}", p)
                                                  for n, p in spec.views.items())]:
        if roots_.overlapping(spec.output, path):
            raise SpecError(f"--output {spec.output} and {what} {path} overlap: a job cannot "
                            "write where it reads")
    check_output(spec)
    partition_columns(spec, submit_columns(spec, unknown=(spec.input,) if missing else ()))
    check_size(spec)
    return spec


def check_layout(spec: JobSpec) -> None:
    """SpecError unless the output's --mode is one of MODES and its --partition-by columns
    are a few distinct plain names (each names a folder level of the output)."""
    if spec.mode not in MODES:
        raise SpecError(f"--mode {spec.mode!r}: one of {', '.join(MODES)}")
    cols = spec.partition_by
    if not isinstance(cols, list) or not all(isinstance(c, str) for c in cols):
        raise SpecError(f"--partition-by: a list of column names, got {cols!r}")
    if len(cols) > MAX_PARTITION_COLUMNS:
        raise SpecError(f"--partition-by: at most {MAX_PARTITION_COLUMNS} columns, got "
                        f"{len(cols)}")
    for c in cols:
        if not _COLUMN.fullmatch(c):
            raise SpecError(f"--partition-by {c[:80]!r}: a column name of letters, digits and "
                            "_ (not starting with a digit), as the output names it")
    lower = [c.lower() for c in cols]
    if len(set(lower)) < len(lower):
        twice = next(c for c in cols if lower.count(c.lower()) > 1)
        raise SpecError(f"--partition-by {twice} is given twice")
    _check_incremental(spec)


def _check_incremental(spec: JobSpec) -> None:
    if not isinstance(spec.incremental, bool) or not isinstance(spec.content_hash, bool):
        raise SpecError("--incremental and --content-hash are true or false")
    if spec.content_hash and not spec.incremental:
        raise SpecError("--content-hash tells files apart for --incremental: give both")
    if not spec.incremental:
        return
    if spec.mode == "append":
        raise SpecError("--incremental replaces the output with a run over the whole input "
                        "(reusing what did not change): it does not go with --mode append")
    if not is_local(spec.input):
        raise SpecError(f"--incremental needs a local input (its files' sizes, times and "
                        f"footers are read here): {spec.input} is not one")


def submit_columns(spec: JobSpec, *, unknown: tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The submit's check of the job's statements against its files' metadata (SQLRefused,
    SpecError when refused), and the output's columns it found (output_columns). The answer of
    an earlier submit of the same statements over the same files is reused: a command then
    imports neither pyarrow nor sqlglot (checkcache)."""
    k = checkcache.key(spec, unknown)
    if k is not None and (found := checkcache.get(k)) is not None:
        return found.columns
    columns = output_columns(statements(spec, columns=True, unknown=unknown))
    if k is not None:
        checkcache.put(k, columns)
    return columns


def output_columns(checked: Statements) -> tuple[str, ...] | None:
    """The output's columns as the checked SQL names them (None: not known without Spark)."""
    last = checked.combine_sql if checked.combine_sql is not None else checked.sql
    return last.columns if last is not None else None


def partition_columns(spec: JobSpec, columns: tuple[str, ...] | list[str] | None) -> None:
    """SpecError unless every --partition-by column is one of the output's `columns` (None:
    not known here; the split checks them against Spark's analysis) and at least one column
    is left for the files."""
    if not spec.partition_by or columns is None or "*" in columns:
        return
    have = {c.lower() for c in columns}
    which = ("--combine-sql" if spec.combine_sql else "--sql" if spec.sql
             else f"--transform {spec.transform}")
    for c in spec.partition_by:
        if c.lower() not in have:
            raise SpecError(f"--partition-by {c}: the output has no column {c!r} (the "
                            f"columns of {which}: {', '.join(columns)})")
    if len(have) <= len(spec.partition_by):
        raise SpecError(f"--partition-by {' '.join(spec.partition_by)}: every column of the "
                        "output is a partition column, which leaves the files none; keep at "
                        "least one out")


def _check_options(*, format: str, output_format: str, sql: str | None, transform: str | None,
                   combine_sql: str | None, chunks: int | None,
                   rows_per_chunk: int | None) -> None:
    if format not in FORMATS:
        raise SpecError(f"--format {format!r}: one of {', '.join(FORMATS)}")
    if output_format not in OUTPUT_FORMATS:
        raise SpecError(f"--output-format {output_format!r}: one of {', '.join(OUTPUT_FORMATS)}")
    if (sql is None) == (transform is None):
        raise SpecError("give exactly one of --sql (Spark SQL over the view `chunk`) and "
                        "--transform NAME (a registered @transform function)")
    if sql is not None and not sql.strip():
        raise SpecError("--sql is empty")
    if combine_sql is not None and not combine_sql.strip():
        raise SpecError("--combine-sql is empty")
    if chunks is not None and rows_per_chunk is not None:
        raise SpecError("give --chunks or --rows-per-chunk, not both")
    if chunks is not None and not 1 <= chunks <= MAX_CHUNKS:
        raise SpecError(f"--chunks {chunks}: between 1 and {MAX_CHUNKS}")
    if rows_per_chunk is not None and rows_per_chunk < 1:
        raise SpecError(f"--rows-per-chunk {rows_per_chunk}: at least 1")
    if transform is not None and transforms.get(transform) is None:
        known = ", ".join(transforms.names()) or "none registered"
        raise SpecError(f"--transform {transform!r} is not registered (known: {known}); "
                        "transforms are registered with @transform(\"name\") in a module "
                        "listed in QA_HANDLER_MODULES")


def _check_path_text(what: str, path: str) -> None:
    if "\0" in path:
        raise SpecError(f"{what}: a path cannot hold a NUL character")
    if len(path) > MAX_PATH_CHARS:
        raise SpecError(f"{what}: the path is {len(path):,} characters long; at most "
                        f"{MAX_PATH_CHARS:,}")
    long = [p for p in Path(path).parts if len(p.encode("utf-8", "surrogatepass")) >
            MAX_NAME_CHARS]
    if long:
        raise SpecError(f"{what}: the name {long[0][:40]!r}... is longer than "
                        f"{MAX_NAME_CHARS} bytes, the most a file name may have")


def check_output(spec: JobSpec) -> None:
    """Refuse an output that is complete already (without --overwrite), and anything at the
    output that a data job did not write (even with --overwrite: it would be deleted)."""
    out = Path(spec.output)
    try:
        if not out.exists() or (out.is_dir() and not any(out.iterdir())):
            return
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise SpecError(f"--output {spec.output}: the path is too long") from None
        raise SpecError(f"--output {spec.output}: {exc.strerror}") from None
    manifest = written_by(out)
    if manifest is None:
        raise SpecError(
            f"output {spec.output} exists and was not written by a data job (no "
            f"{SUCCESS} and _manifest.json there: perhaps a failed or cancelled job's, or "
            "other files); --overwrite only replaces a data job's complete output. Remove it "
            "yourself, or choose another --output")
    if spec.mode == "append":
        appendable(spec, manifest)
        return
    if not spec.overwrite:
        raise SpecError(f"output {spec.output} is already complete ({SUCCESS} is there, "
                        f"written by job {manifest['job']} at "
                        f"{manifest.get('finished_at', '?')}); pass --overwrite to replace "
                        "it, or choose another --output")


def appendable(spec: JobSpec, manifest: dict[str, Any]) -> None:
    """SpecError unless this job's rows may join the complete output `manifest` describes:
    the same output format and partition columns (a reader reads the folder as one table)."""
    had_format = manifest.get("output_format")
    had = manifest.get("partition_by")
    had_parts = [str(c) for c in had] if isinstance(had, list) else []
    if had_format != spec.output_format:
        raise SpecError(f"--mode append: output {spec.output} holds {had_format} files; append "
                        f"with --output-format {had_format}, or choose another --output")
    if [c.lower() for c in had_parts] != [c.lower() for c in spec.partition_by]:
        shown = " ".join(f"--partition-by {c}" for c in had_parts) or "no --partition-by"
        raise SpecError(f"--mode append: output {spec.output} is partitioned as {shown} "
                        "says; append with the same, or choose another --output")


def statements(spec: JobSpec, *, columns: bool, unknown: tuple[str, ...] = ()) -> Statements:
    """The job's checked statements (SQLRefused if one may not run). With `columns`, their
    columns are resolved against the input's and views' metadata (submit; not those of the
    paths `unknown`, which may not exist yet); the worker's check leaves that to Spark."""
    from . import sqlcheck  # sqlglot: imported by the checks that parse, not by every command

    def cols(path: str, fmt: str, view: bool = False) -> Schema | None:
        return schema.columns_of(path, fmt, view=view) if columns and path not in unknown \
            else None

    views = {n: cols(p, view_format(p), view=True) for n, p in spec.views.items()}
    sql = None
    chunk_columns: tuple[str, ...] | None = None
    if spec.sql is not None:
        sql = sqlcheck.check_sql(spec.sql, option="--sql",
                                 views={"chunk": cols(spec.input, spec.format), **views})
        chunk_columns = sql.columns
    combine = None
    if spec.combine_sql is not None:
        parts = ({c: "UNKNOWN" for c in chunk_columns}
                 if columns and chunk_columns is not None else None)
        combine = sqlcheck.check_sql(spec.combine_sql, option="--combine-sql",
                                     views={"parts": parts, **views})
    return Statements(sql, combine)


def confine(spec: JobSpec, roots: DataRoots | None = None) -> Statements:
    """The worker's check of a task's spec (it came from Redis): its paths under the roots,
    its statements allowed; SpecError otherwise. Returns what Spark runs."""
    roots = roots or roots_.from_settings()
    try:  # the job id names its staging folder beside the output: no / nor ..
        validate_id(spec.job_id, "job id")
    except InvalidInput as exc:
        raise SpecError(str(exc)) from None
    resolved = {roots_.check_input(spec.input, roots)}
    resolved |= {roots_.check_input(p, roots, what=f"--view {n}", wildcards=False)
                 for n, p in spec.views.items()}
    out = roots_.check_output(spec.output, roots)
    if out != os.path.normpath(spec.output) or not os.path.isabs(spec.output):
        raise SpecError(f"--output {spec.output} is not a resolved path")
    if any(roots_.overlapping(out, p) for p in resolved):
        raise SpecError(f"--output {spec.output} overlaps the job's input")
    check_layout(spec)
    return statements(spec, columns=False)


def read_paths(spec: JobSpec, paths: list[str]) -> None:
    """SpecError unless every path a chunk's read names (its files, the folder of their
    partition columns) lies in the job's own input: a task in Redis may name any file, and
    the input itself was checked against the roots. Spark is given each by name: none may hold
    a character it would read as a pattern (roots.GLOB_CHARS)."""
    patterned = [p for p in paths if roots_.GLOB_CHARS & set(p)]
    if patterned:
        raise SpecError(f"it reads {patterned[0]}, whose name Spark would read as a pattern "
                        "(Hadoop's glob: { } [ ] * ? \\)")
    if not is_local(spec.input):
        prefix = spec.input.rstrip("*").rstrip("/") if "*" in spec.input else spec.input
        bad = [p for p in paths if not (p == spec.input or p.startswith(prefix))]
    else:
        base = os.path.realpath(spec.input) if not glob.has_magic(spec.input) else None
        bad = []
        for p in paths:
            real = os.path.realpath(p)
            if base is not None:
                inside = real == base or real.startswith(base.rstrip(os.sep) + os.sep)
            else:
                inside = any(real == m or real.startswith(m + os.sep)
                             for m in map(os.path.realpath, glob.glob(spec.input)))
            if not inside:
                bad.append(p)
    if bad:
        raise SpecError(f"it reads {bad[0]}, which is not part of the job's input "
                        f"{spec.input}")

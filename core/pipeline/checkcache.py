"""What a data job's submit-time check found, kept between commands.

`datajob submit` is a process of its own. Before anything is queued it reads the columns of
the input and views from their metadata (a Parquet footer through pyarrow, which imports
numpy) and checks the SQL against them (sqlglot): importing the two costs the command more
than the queueing itself, and for a small job a fifth of the whole run (docs/performance.md).
A job submitted again over the same files (a re-run, a script, a fixed nightly command) gets
the same answer, so the answer (the output's columns, which --partition-by is checked
against) is kept in `settings.CHECK_CACHE_DIR`, one small JSON file per answer, keyed by
everything it depends on:

- the job's statements (--sql, --combine-sql, --transform), its input's and views' paths and
  formats;
- each local file whose columns are read: its path, size, modification time and a digest of
  its Parquet footer (core.pipeline.incremental.identity) or of a CSV or JSON file's first
  64 KiB, and the partition columns its path names;
- the checking code and its libraries: check.py, schema.py, sqlcheck.py and the allowed
  functions' list, and the installed sqlglot and pyarrow (their versions, and their files'
  sizes and times).

Only answers that let a job through are kept; a refusal is worked out again each time, so its
message says what is wrong now. Only a submit uses them: the worker's check of each task
(check.confine) never does, so a changed or planted entry can at most let a submit through
that the job's first task then refuses. An entry that cannot be read is a miss, one that
cannot be written is not kept, and at most MAX_ENTRIES are kept (the oldest go first).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import importlib.util
import json
import os
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from django.conf import settings

from .schema import first_file
from .spec import JobSpec, is_local, view_format

MAX_ENTRIES = 2000
HEAD_BYTES = 64 * 1024  # of a CSV or JSON file, digested into its identity
VERSION = 1  # of the entries' layout
_HERE = Path(__file__).resolve().parent
_CODE = ("check.py", "schema.py", "sqlcheck.py", "spark_functions.txt")
_LIBRARIES = ("sqlglot", "pyarrow")


class Cached(NamedTuple):
    """An answer found: the output's columns (None: not known without Spark)."""

    columns: tuple[str, ...] | None


def key(spec: JobSpec, unknown: tuple[str, ...] = ()) -> dict[str, Any] | None:
    """What the submit's check of `spec` depends on (see the module's docstring), or None
    when a file it would read cannot be identified (the check then says why), or when no
    answers are kept."""
    if settings.CHECK_CACHE_DIR is None:
        return None
    files: dict[str, list[Any]] = {}
    for what, path, fmt in [("input", spec.input, spec.format),
                            *((f"view {n}", p, view_format(p))
                              for n, p in sorted(spec.views.items()))]:
        if path in unknown or not is_local(path):
            files[what] = [path, fmt, None]
            continue
        found = _file(path, fmt)
        if found is None:
            return None
        files[what] = [path, fmt, found]
    return {"v": VERSION, "sql": spec.sql, "combine_sql": spec.combine_sql,
            "transform": spec.transform, "files": files, "code": _code()}


def get(k: dict[str, Any]) -> Cached | None:
    """The answer kept for `k`, or None."""
    path = _entry(k)
    if path is None:
        return None
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        if kept["key"] != _plain(k):  # another key with the same digest: not ours
            return None
        columns = kept["columns"]
        if columns is None:
            return Cached(None)
        if isinstance(columns, list) and all(isinstance(c, str) for c in columns):
            return Cached(tuple(columns))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def put(k: dict[str, Any], columns: tuple[str, ...] | None) -> None:
    """Keep the answer `columns` for `k`; nothing happens if it cannot be written."""
    path = _entry(k)
    if path is None:
        return
    body = json.dumps({"key": _plain(k), "columns": None if columns is None else list(columns)})
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(body)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return
    _prune(path.parent)


def _entry(k: dict[str, Any]) -> Path | None:
    folder = settings.CHECK_CACHE_DIR
    if folder is None:
        return None
    digest = hashlib.sha256(json.dumps(k, sort_keys=True).encode()).hexdigest()
    return Path(folder) / f"{digest[:40]}.json"


def _plain(k: dict[str, Any]) -> Any:
    """`k` as it reads back from JSON (tuples as lists)."""
    return json.loads(json.dumps(k, sort_keys=True))


def _file(path: str, fmt: str) -> list[Any] | None:
    """The identity of the file whose columns schema.columns_of reads for `path`."""
    from .incremental import identity

    try:
        found = first_file(path)
        if found is None:
            return None
        file, partitions = found
        same = identity(file, fmt, content_hash=False)
        if fmt != "parquet":  # its columns are its first lines': a rewrite within one tick
            with open(file, "rb") as fh:  # of the clock, of the same size, is seen too
                same["head"] = hashlib.sha256(fh.read(HEAD_BYTES)).hexdigest()
        return [same, sorted(partitions.items())]
    except (OSError, ValueError):
        return None


@functools.cache
def _code() -> list[Any]:
    """The checking code's and its libraries' files, by size and time: a change of either
    (an upgrade, an edit) makes every kept answer a miss."""
    paths = [str(_HERE / name) for name in _CODE]
    out: list[Any] = []
    for name in _LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            out.append(f"no {name}")
            continue
        paths.append(spec.origin)
        # Its version, from the name of its installed metadata's folder (importing the
        # library, or importlib.metadata, to ask would cost what this saves).
        site = os.path.dirname(os.path.dirname(spec.origin))
        out.append(sorted(os.path.basename(d) for d in glob.glob(
            os.path.join(glob.escape(site), f"{name}-*.dist-info"))))
    for p in paths:
        try:
            st = os.stat(p)
            out.append([p, st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([p, None, None])
    return out


def _prune(folder: Path) -> None:
    """Past MAX_ENTRIES, remove the oldest quarter."""
    try:
        entries = [e for e in os.scandir(folder) if e.name.endswith(".json")]
        if len(entries) <= MAX_ENTRIES:
            return
        entries.sort(key=lambda e: e.stat().st_mtime_ns)
        for e in entries[: len(entries) // 4]:
            with contextlib.suppress(OSError):
                os.unlink(e.path)
    except OSError:
        return

"""Incremental re-runs (`--incremental`): a job run again over an input where only some files
changed reuses the parts of the chunks of the output's last complete run whose files are
unchanged, computes only the rest, then combines them all.

- **What a chunk read**: its files' identities, each the file's path, size, modification time
  and (Parquet) a digest of its footer; with `--content-hash`, its path, size and a SHA-256 of
  its bytes instead (a file touched, or copied back, unchanged is then still the same).
- **What the parts depend on besides**: the job's fingerprint, a digest of its chunk SQL (or
  its transform, by name and source), its input's format and columns, its views (each file's
  identity), how the parts are written (their format, partition columns) and Spark's version.
  A run whose fingerprint differs from the last run's reuses nothing.
- **Where the parts are kept**: an incremental run hard-links its chunks' parts (no copy) into
  a hidden folder beside the output, `.NAME.parts/<run>/NNNNN/`, named in its manifest; the
  next run hard-links the reusable ones into its own staging as its first chunks (no task
  runs for them), plans the other files into new chunks of whole files, and once its output
  is in place keeps its own parts there and removes the earlier run's.

Chunks of an incremental job are whole files (never row groups or byte ranges), so that a new
file leaves the other chunks as they were.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import plan, transforms
from .errors import DataJobError
from .spec import JobSpec, view_format, written_by

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_RUN = re.compile(r"r[0-9a-f]{16}-[0-9]{1,16}")  # a kept run's folder name
HASH_BLOCK = 1024 * 1024


def _footer_digest(path: str) -> str | None:
    """SHA-256 of a Parquet file's footer (its schema, row groups and statistics), read from
    the file's last bytes; None if it has none."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        if size < 12:
            return None
        f.seek(size - 8)
        tail = f.read(8)
        if tail[4:] != b"PAR1":
            return None
        length = int.from_bytes(tail[:4], "little")
        if length > size - 12:
            return None
        f.seek(size - 8 - length)
        return hashlib.sha256(f.read(length)).hexdigest()


def _content_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(HASH_BLOCK):
            h.update(block)
    return h.hexdigest()


def identity(path: str, fmt: str, *, content_hash: bool) -> dict[str, Any]:
    """What tells a file apart from its next version (see the module's docstring)."""
    st = os.stat(path)
    if content_hash:
        return {"path": path, "size": st.st_size, "sha256": _content_digest(path)}
    return {"path": path, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "footer": _footer_digest(path) if fmt == "parquet" else None}


def identities(spec: JobSpec, files: list[str]) -> dict[str, dict[str, Any]]:
    try:
        return {f: identity(f, spec.format, content_hash=spec.content_hash) for f in files}
    except FileNotFoundError as exc:
        raise DataJobError(f"the split of job {spec.job_id}: a file is missing (moved or "
                           f"deleted since the job was submitted?): {exc}") from exc


def _view_identities(spec: JobSpec) -> dict[str, list[dict[str, Any]]]:
    out = {}
    for name, path in sorted(spec.views.items()):
        listing = plan.list_input(JobSpec(job_id=spec.job_id, input=path,
                                          format=view_format(path), output=spec.output))
        files = listing.files if listing is not None else [path]
        out[name] = [identity(f, view_format(path), content_hash=spec.content_hash)
                     for f in files]
    return out


def _transform_source(name: str | None) -> str | None:
    fn = transforms.get(name or "")
    if fn is None:
        return None
    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def fingerprint(spec: JobSpec, sql_text: str | None, schema: str, version: str) -> str:
    """A digest of everything a chunk's part depends on besides its files."""
    what = {
        "sql": sql_text, "transform": spec.transform,
        "transform_source": _transform_source(spec.transform), "format": spec.format,
        "schema": schema, "views": _view_identities(spec), "parts_format": spec.parts_format,
        "partition_by": None if spec.combine_sql else spec.partition_by,
        "spark": version, "identity": "sha256" if spec.content_hash else "stat",
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


# -- the split: which of the last run's chunks are reused ---------------------------------


@dataclass(frozen=True)
class Last:
    """The output's last complete incremental run: its fingerprint, where its parts are kept
    and each chunk's file identities (and report)."""

    fingerprint: str
    parts: Path
    chunks: list[list[dict[str, Any]]]
    reports: list[dict[str, Any] | None]
    schema: str | None = None  # the input's columns as that run read them (JSON)


def kept_root(spec: JobSpec) -> Path:
    out = Path(spec.output)
    return out.parent / f".{out.name}.parts"


def last_run(spec: JobSpec) -> Last | None:
    """The last run's incremental record, from the output's manifest (a file in the output
    folder: checked as any input is), or None (no output, not incremental, or malformed)."""
    manifest = written_by(Path(spec.output))
    inc = manifest.get("incremental") if manifest is not None else None
    if not isinstance(inc, dict):
        return None
    run, fp, chunks = inc.get("kept"), inc.get("fingerprint"), inc.get("inputs")
    if not (isinstance(run, str) and _RUN.fullmatch(run) and isinstance(fp, str)
            and isinstance(chunks, list) and all(isinstance(c, list) for c in chunks)):
        return None
    reports = manifest.get("chunks") if manifest is not None else None
    if not isinstance(reports, list) or len(reports) != len(chunks):
        reports = [None] * len(chunks)
    parts = kept_root(spec) / run
    schema = inc.get("schema") if isinstance(inc.get("schema"), str) else None
    return Last(fp, parts, chunks, reports, schema) if parts.is_dir() else None


def known_frame(session: SparkSession, spec: JobSpec, listing: plan.Listing) -> Any:
    """A CSV or JSON input read with the columns its last run inferred, when the files new or
    changed since infer exactly those alone (Spark's inference over every file widens each
    column's type over all of them, so it would give the same): the split's inference then
    reads those files, not the whole input. None otherwise (Parquet, --content-hash, no last
    run): the caller lets Spark infer over every file."""
    from pyspark.sql.types import StructType

    from . import io

    if spec.format == "parquet" or spec.content_hash:
        return None
    last = last_run(spec)
    if last is None or not last.schema:
        return None
    seen = {str(i.get("path")): i for chunk in last.chunks for i in chunk if isinstance(i, dict)}
    fresh = [f for f in listing.files if not _same(seen.get(f, {}), identities(spec, [f])[f])]
    if fresh and io.read_input(session, spec, fresh, base=listing.base).schema.json() \
            != last.schema:
        return None
    schema = StructType.fromJson(json.loads(last.schema))
    return io.read_input(session, spec, listing.files, base=listing.base, schema=schema)


def _same(then: dict[str, Any], now: dict[str, Any] | None) -> bool:
    return now is not None and all(then.get(k) == now.get(k) for k in now)


def replan(spec: JobSpec, listing: plan.Listing, footers: list[plan.InputFile] | None,
           slots: int, fp: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]],
                                          list[list[dict[str, Any]]]]:
    """The chunks' reads (the reused ones first), the reused chunks' reports, and every
    chunk's file identities. The reused chunks' parts are hard-linked into the staging."""
    ids = identities(spec, listing.files)
    last = last_run(spec)
    reused: list[tuple[int, list[str]]] = []
    taken: set[str] = set()
    if last is not None and last.fingerprint == fp:
        for k, chunk in enumerate(last.chunks):
            paths = [str(i.get("path")) for i in chunk if isinstance(i, dict)]
            if paths and len(paths) == len(chunk) and not taken & set(paths) and all(
                    _same(i, ids.get(str(i.get("path")))) for i in chunk) \
                    and (last.parts / f"{k:05d}").is_dir():
                reused.append((k, paths))
                taken |= set(paths)
    rows_of = {f.path: f.rows for f in footers} if footers is not None else {}
    rest = [f for f in listing.files if f not in taken]
    weighed = [plan.InputFile(f, max(1, int(ids[f]["size"]))) for f in rest]
    n = plan.chunk_count(spec, rows=None, work_bytes=sum(f.size for f in weighed),
                         slots=slots) if rest else 0
    fresh = plan.file_reads(weighed, n, listing.base) if rest else []
    reads = [{"files": paths, **({"base": listing.base} if listing.base else {})}
             for _, paths in reused] + fresh
    for r in reads:
        if rows_of:
            r["known_rows"] = sum(rows_of.get(p, 0) for p in r["files"])
    for new_k, (old_k, _) in enumerate(reused):
        _link_tree(last.parts / f"{old_k:05d}", spec.part_dir(new_k))  # type: ignore[union-attr]
    reports = []
    for new_k, (old_k, _) in enumerate(reused):
        was = last.reports[old_k] if last is not None else None
        reports.append({**(was if isinstance(was, dict) else {"rows_in": None, "rows_out": 0}),
                        "chunk": new_k, "reused": True, "reused_from": old_k, "seconds": 0.0})
    return reads, reports, [[ids[p] for p in r["files"]] for r in reads]


def _link_tree(src: Path, dst: Path) -> None:
    """Hard links in the new folder `dst` to every regular file below `src` (a kept part)."""
    tmp = dst.parent / f".link-{dst.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    for root, _dirs, names in os.walk(src):
        rel = Path(root).relative_to(src)
        (tmp / rel).mkdir(parents=True, exist_ok=True)
        for name in names:
            f = Path(root, name)
            if f.is_symlink() or not f.is_file():
                continue
            os.link(f, tmp / rel / name)
    tmp.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(dst, ignore_errors=True)
    os.rename(tmp, dst)


# -- the combine: keep this run's parts for the next ----------------------------------------


def run_name(spec: JobSpec, submitted_ms: int | None) -> str:
    return f"{spec.run_tag}-{submitted_ms or 0}"


def keep_parts(spec: JobSpec, n: int) -> None:
    """Hard links to the n chunks' parts in the staging's `kept` folder, before the combine
    moves or reads them (a job without combine SQL moves its parts into the output)."""
    kept = spec.staging / "kept"
    shutil.rmtree(kept, ignore_errors=True)
    kept.mkdir(parents=True)
    for k in range(n):
        _link_tree(spec.part_dir(k), kept / f"{k:05d}")


def store(spec: JobSpec, run: str) -> None:
    """This run's kept parts moved beside the output, as `.NAME.parts/<run>` (before the
    output that names them is put in place)."""
    root = kept_root(spec)
    root.mkdir(exist_ok=True)
    target = root / run
    shutil.rmtree(target, ignore_errors=True)
    os.rename(spec.staging / "kept", target)


def prune(spec: JobSpec, run: str) -> None:
    """Remove the kept parts of every run but `run` (the one the output now names; "" for
    none: a run that was not incremental replaced the output)."""
    root = kept_root(spec)
    if not root.is_dir():
        return
    for old in root.iterdir():
        if old.name != run and _RUN.fullmatch(old.name):
            shutil.rmtree(old, ignore_errors=True)
    with contextlib.suppress(OSError):  # what is left, if nothing
        root.rmdir()


def manifest_fields(rec: dict[str, Any], run: str) -> dict[str, Any]:
    """The manifest's `incremental` record and its `reused_chunks`/`computed_chunks`."""
    inputs = json.loads(rec.get("inputs") or "[]")
    reused = int(rec.get("reused") or 0)
    n = int(rec["chunks"])
    return {"incremental": {"kept": run, "fingerprint": rec.get("fingerprint"),
                            "schema": rec.get("schema") or None, "inputs": inputs},
            "reused_chunks": list(range(reused)), "computed_chunks": list(range(reused, n))}

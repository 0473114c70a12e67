"""Putting a combined run in place at the job's output: in --mode overwrite, instead of what
was there (a data job's complete output, with --overwrite); in --mode append, beside the
earlier runs' rows, replacing only those an earlier run of the same job id wrote.

An appended output is one folder that any reader takes as one table: Hive-style partition
folders (`COL=value/`) when the job has --partition-by, and data files whose names carry the
run's tag (JobSpec.run_tag, a digest of the job id: a schedule's slot has one id), so that a
re-run of a job, or of a schedule's slot, finds its own files by name. The new output is
assembled in the job's staging folder (this run's files, and hard links to the files of the
other runs: no data is copied), then put in place by two renames, as an overwrite is: a
reader sees the output before the run or after it, never a run's rows twice or half of them.
A crash between the two renames leaves the assembled output in the staging folder; the
combine step's retry puts it in place (resume()). Two runs never assemble the same output at
once: a lock file beside it (`.NAME.lock`) is held from the assembly to the rename.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from . import io
from .errors import DataJobError
from .spec import JobSpec, written_by


def resume(spec: JobSpec) -> dict[str, Any] | None:
    """The manifest of this job's output if an earlier attempt assembled it and stopped
    between moving the old output away and moving the new one in (the output is missing):
    it is put in place now. None otherwise (nothing done)."""
    out, staged = Path(spec.output), spec.staging / "out"
    if out.exists() or out.is_symlink():
        return None
    done = written_by(staged)
    if done is None or done.get("job") != spec.job_id:
        return None
    os.rename(staged, out)
    return done


def tag_files(staged: Path, tag: str) -> int:
    """Rename every data file of the assembled run `staged` (and its partition folders) to
    carry the run's `tag`: `part-<tag>-<n><suffix>`. Spark's checksum of a renamed file goes
    (it names the old file). Returns the files."""
    files = io.tree_files(staged)
    for n, f in enumerate(files):
        suffix = "".join(f.suffixes[-2:]) if f.name.endswith(".snappy.parquet") else f.suffix
        os.rename(f, f.parent / f"part-{tag}-{n:05d}{suffix}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f.parent / f".{f.name}.crc")
    return len(files)


def runs(spec: JobSpec, previous: dict[str, Any] | None, this: dict[str, Any]) -> list[Any]:
    """The runs an appended output holds after this one (its manifest's `runs`): the earlier
    ones except an earlier run of this job id, then this one."""
    earlier: list[Any] = []
    if previous is not None:
        had = previous.get("runs")
        if isinstance(had, list):
            earlier = [r for r in had if isinstance(r, dict) and r.get("tag") != spec.run_tag]
        else:  # an output written in overwrite mode: its rows stay, as one run
            earlier = [{"job": previous.get("job"), "tag": None,
                        "rows_out": previous.get("rows_out"),
                        "finished_at": previous.get("finished_at")}]
    return [*earlier, this]


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """The output's lock (a file beside it), held by one assembly at a time."""
    lock = out.parent / f".{out.name}.lock"
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def previous_run(spec: JobSpec) -> dict[str, Any] | None:
    """The manifest of the complete output this run appends to (None: none yet)."""
    return written_by(Path(spec.output))


def place(spec: JobSpec, staged: Path) -> None:
    """Put the assembled run `staged` in place at the output: overwrite, or (append) beside
    the other runs' files, hard-linked into `staged` first; then two renames."""
    out = Path(spec.output)
    if spec.mode != "append":
        _replace(spec, out)
        os.rename(staged, out)
        return
    if out.exists() or out.is_symlink():
        if out.is_symlink() or written_by(out) is None:
            raise _not_ours(spec, out)
        _link_others(spec, out, staged)
        old = spec.staging / "old"  # removed with the staging folder
        shutil.rmtree(old, ignore_errors=True)
        os.rename(out, old)
    os.rename(staged, out)


def _link_others(spec: JobSpec, out: Path, staged: Path) -> None:
    """Hard links in `staged` to every data file of `out` that this job's run did not write
    (a file of this run is named after its tag): the other runs' rows, kept as they are."""
    mine = f"part-{spec.run_tag}-"
    for f in io.tree_files(out):
        if f.name.startswith(mine):
            continue
        if f.is_symlink():
            raise _not_ours(spec, out)
        target = staged / f.relative_to(out)
        if target.exists():
            raise DataJobError(f"the combine step of job {spec.job_id}: {f} and this run's "
                               "file have one name; nothing was changed", permanent=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.link(f, target)


def _replace(spec: JobSpec, out: Path) -> None:
    """Make room for the output: nothing there, an empty folder, or (with --overwrite) a
    data job's complete output. Anything else stays, and the job fails saying why."""
    if not out.exists() and not out.is_symlink():
        return
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        out.rmdir()
        return
    if spec.overwrite and not out.is_symlink() and written_by(out) is not None:
        shutil.rmtree(out)
        return
    raise _not_ours(spec, out)


def _not_ours(spec: JobSpec, out: Path) -> DataJobError:
    verb = "append to" if spec.mode == "append" else "replace"
    flag = "--mode append" if spec.mode == "append" else "--overwrite"
    return DataJobError(f"the combine step of job {spec.job_id}: {out} exists and is not a "
                        f"data job's output that {flag} may {verb}; nothing was changed "
                        "there (remove it, or submit with another --output)", permanent=True)


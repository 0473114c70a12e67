"""A data job's description (JobSpec), where its files go (staging next to the output), and
the checks that need no Spark: a job is refused before anything is queued, with a message
that says what to change."""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import transforms

FORMATS = ("parquet", "csv", "json")
OUTPUT_FORMATS = ("parquet", "csv")
MAX_CHUNKS = 10_000
DEFAULT_ROWS_PER_CHUNK = 1_000_000
RESERVED_VIEWS = ("chunk", "parts")
_VIEW_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
MANIFEST = "_manifest.json"
SUCCESS = "_SUCCESS"


class SpecError(ValueError):
    """A job that cannot run as described; the message says what to change."""


@dataclass(frozen=True)
class JobSpec:
    """What a job reads, how it transforms each chunk, how the parts are combined and where
    the result goes. Paths are absolute: workers do not share the submitter's directory."""

    job_id: str
    input: str
    format: str
    output: str
    output_format: str = "parquet"
    sql: str | None = None
    transform: str | None = None
    combine_sql: str | None = None
    views: dict[str, str] = field(default_factory=dict)
    chunks: int | None = None
    rows_per_chunk: int | None = None
    overwrite: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JobSpec:
        return cls(**{**d, "views": dict(d.get("views") or {})})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @property
    def parts_format(self) -> str:
        """Chunks write their parts in the output's format, or as Parquet when a combine
        step reads them back."""
        return "parquet" if self.combine_sql else self.output_format

    @property
    def staging(self) -> Path:
        """Hidden, next to the output (same filesystem: the final move is a rename)."""
        out = Path(self.output)
        return out.parent / f".{out.name}.{self.job_id}.staging"

    def chunk_dir(self, k: int) -> Path:
        return self.staging / "chunks" / f"{k:05d}"

    def part_dir(self, k: int) -> Path:
        return self.staging / "parts" / f"{k:05d}"


def is_local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def local_path(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def parse_views(items: list[str]) -> dict[str, str]:
    """`NAME=PATH` options into a mapping; SpecError for a malformed or reserved one."""
    views: dict[str, str] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not path:
            raise SpecError(f"--view {item!r}: expected NAME=PATH, e.g. planes=data/planes.parquet")
        if not _VIEW_NAME.fullmatch(name):
            raise SpecError(f"--view {item!r}: {name!r} is not a table name the SQL can use "
                            "(letters, digits and _, not starting with a digit)")
        if name.lower() in RESERVED_VIEWS:
            raise SpecError(f"--view {item!r}: {name!r} is reserved for the job's own view")
        if name in views:
            raise SpecError(f"--view {name} is given twice")
        views[name] = path
    return views


def view_format(path: str) -> str:
    """The format of a --view, from its name: .csv, .json/.jsonl, else Parquet."""
    lower = path.lower().rstrip("/")
    if lower.endswith(".csv"):
        return "csv"
    if lower.endswith((".json", ".jsonl", ".ndjson")):
        return "json"
    return "parquet"


def _absolute(path: str) -> str:
    return os.path.abspath(os.path.expanduser(local_path(path))) if is_local(path) else path


def _matches(path: str) -> list[str]:
    return glob.glob(path) if glob.has_magic(path) else ([path] if os.path.exists(path) else [])


def make_spec(
    *, job_id: str, input: str, format: str, output: str, output_format: str = "parquet",
    sql: str | None = None, transform: str | None = None, combine_sql: str | None = None,
    views: dict[str, str] | None = None, chunks: int | None = None,
    rows_per_chunk: int | None = None, overwrite: bool = False,
) -> JobSpec:
    """A spec with absolute paths, after every check that needs no Spark: SpecError if the
    job cannot run as described."""
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
    spec = JobSpec(
        job_id=job_id, input=_absolute(input), format=format, output=_absolute(output),
        output_format=output_format, sql=sql, transform=transform, combine_sql=combine_sql,
        views={n: _absolute(p) for n, p in (views or {}).items()}, chunks=chunks,
        rows_per_chunk=rows_per_chunk, overwrite=overwrite,
    )
    if is_local(spec.input) and not _matches(spec.input):
        raise SpecError(f"input {input!r} does not exist"
                        + (" (the pattern matches no file)" if glob.has_magic(input) else ""))
    for name, path in spec.views.items():
        if is_local(path) and not _matches(path):
            raise SpecError(f"--view {name}={path}: no such file or directory")
    if not is_local(spec.output):
        raise SpecError(f"--output {output!r}: the output must be a path on a filesystem every "
                        "worker shares (its parts are moved into place by renaming)")
    check_output(spec)
    return spec


def check_output(spec: JobSpec) -> None:
    """Refuse an output that is complete already, or a directory of other files, without
    --overwrite."""
    out = Path(spec.output)
    if spec.overwrite or not out.exists():
        return
    if (out / SUCCESS).exists():
        raise SpecError(f"output {spec.output} is already complete ({SUCCESS} is there"
                        f"{_made_by(out)}); pass --overwrite to replace it, or choose "
                        "another --output")
    if out.is_file() or any(out.iterdir()):
        raise SpecError(f"output {spec.output} exists and is not empty (no {SUCCESS}: perhaps "
                        "a failed or cancelled job's); pass --overwrite to replace it, or "
                        "choose another --output")


def _made_by(out: Path) -> str:
    try:
        manifest = json.loads((out / MANIFEST).read_text())
        return f", written by job {manifest['job']} at {manifest['finished_at']}"
    except (OSError, ValueError, KeyError, TypeError):
        return ""

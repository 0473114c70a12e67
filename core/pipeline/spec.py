"""A data job's description (JobSpec) and where its files go (staging next to the output).
The checks that refuse a job before anything is queued are in check.py."""

from __future__ import annotations

import glob
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import PipelineError

FORMATS = ("parquet", "csv", "json")
OUTPUT_FORMATS = ("parquet", "csv")
MODES = ("overwrite", "append")
MAX_PARTITION_COLUMNS = 8
MAX_CHUNKS = 10_000
RESERVED_VIEWS = ("chunk", "parts")
_VIEW_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
MANIFEST = "_manifest.json"
SUCCESS = "_SUCCESS"


class SpecError(PipelineError, ValueError):
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
    # Hive-style partition folders (`COL=value/`) of the output, by these columns of it
    partition_by: list[str] = field(default_factory=list)
    # overwrite: the output is this run's rows; append: the output's earlier runs' rows stay
    # and this run's replace those an earlier run of the same job id wrote (output.py)
    mode: str = "overwrite"
    # reuse the parts of the output's last run's chunks whose files did not change
    # (incremental.py); files told apart by a SHA-256 of their bytes with content_hash
    incremental: bool = False
    content_hash: bool = False

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

    @property
    def run_tag(self) -> str:
        """What the names of this run's files carry in an appended output: a digest of the
        job id (a schedule's slot has one id), so that a run's own files are told apart by
        name whatever characters the id holds."""
        import hashlib

        return "r" + hashlib.sha256(self.job_id.encode()).hexdigest()[:16]


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


def _matches(path: str) -> list[str]:
    return glob.glob(path) if glob.has_magic(path) else ([path] if os.path.exists(path) else [])


def written_by(out: Path) -> dict[str, Any] | None:
    """The manifest of a complete output a data job wrote (`_manifest.json` naming its job,
    and `_SUCCESS`), or None: anything else at `out` is not this project's to replace."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
        if not (out / SUCCESS).is_file():
            return None
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and isinstance(manifest.get("job"), str) \
        else None

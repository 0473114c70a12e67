"""Audit entries written out as JSON lines before the pruner removes them (issue 35).

One object per line, every column of the entry (`at` in ISO 8601, UTC), appended to the file
`manage.py prune --export-audit FILE` names, or by default to `<QA_AUDIT_EXPORT>/audit-YYYY-MM
.jsonl` by the month of each entry (var/audit unless the setting says otherwise; "off": none).
A batch is written and synced before it is deleted, so an entry is never removed without its
copy; a crash between the two writes it again at the next pass (an entry's `id` tells the
copies apart).
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from django.conf import settings

OFF = "off"


class AuditExport:
    """Where the audit entries go before they are pruned: a file, or a folder of monthly
    files. Files are the owner's only (0600), as var/ is."""

    def __init__(self, target: str | None) -> None:
        self.file = Path(target) if target else None
        raw = str(getattr(settings, "AUDIT_EXPORT", "") or "").strip()
        self.folder = None if self.file or raw.lower() == OFF or not raw else Path(raw)
        self.written = 0
        self.paths: set[str] = set()

    @property
    def on(self) -> bool:
        return self.file is not None or self.folder is not None

    def describe(self) -> str:
        if self.file is not None:
            return str(self.file)
        if self.folder is not None:
            return str(self.folder / "audit-YYYY-MM.jsonl")
        return "off (QA_AUDIT_EXPORT=off): removed without a copy"

    def write(self, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        """Append `rows` (each the entry's columns, in `columns` order), synced to disk."""
        by_path: dict[Path, list[str]] = {}
        for row in rows:
            entry = {c: _plain(v) for c, v in zip(columns, row, strict=True)}
            path = self.file or self._monthly(entry.get("at"))
            by_path.setdefault(path, []).append(json.dumps(entry, ensure_ascii=False))
        for path, lines in by_path.items():
            with _open(path) as f:
                f.write("\n".join(lines) + "\n")
                f.flush()
                os.fsync(f.fileno())
            self.paths.add(str(path))
        self.written += len(rows)

    def _monthly(self, at: Any) -> Path:
        assert self.folder is not None
        month = str(at or "")[:7] if str(at or "")[:4].isdigit() else "unknown"
        return self.folder / f"audit-{month}.jsonl"


def _open(path: Path) -> TextIO:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    return os.fdopen(fd, "a", encoding="utf-8")


def _plain(value: Any) -> Any:
    """A column's value as JSON holds it: times in ISO 8601, UTC."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).isoformat()
    if isinstance(value, str) and len(value) >= 19 and value[4] == "-" and value[10] == " ":
        # SQLite's text of a datetime column, read through an expression
        try:
            return _plain(dt.datetime.fromisoformat(value))
        except ValueError:
            return value
    return value

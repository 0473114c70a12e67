"""Audit entries are written out as JSON lines before they go (issue 35, item 2): each batch's
lines are on disk before the statement that deletes its rows runs, and an export that cannot
be written keeps the entries. Real database (SQLite, or PostgreSQL with DATABASE_URL)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from core.mirror import retention_prune
from core.mirror.retention_prune import prune
from core.models import AuditEntry

pytestmark = pytest.mark.django_db

LONG_AGO = datetime(2020, 1, 15, 10, 0, tzinfo=UTC)
LATER = datetime(2021, 3, 1, tzinfo=UTC)


def old_entries(n: int) -> list[int]:
    """`n` audit entries from LONG_AGO (past a year's retention at LATER), their ids."""
    ids = [AuditEntry.objects.create(actor=f"alice{i}", source="cli", action="requeue",
                                     queue="q", target=f"d{i}", count=1).pk for i in range(n)]
    AuditEntry.objects.filter(pk__in=ids).update(at=LONG_AGO)
    return ids


def test_each_batch_is_on_disk_before_its_rows_are_deleted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = old_entries(7)
    export = tmp_path / "audit.jsonl"
    monkeypatch.setattr(retention_prune, "BATCH_FIRST", 3)  # 3 batches: 3, then more
    on_disk_at_delete: list[list[int]] = []
    table = AuditEntry._meta.db_table

    def watch(execute: Callable[..., Any], sql: str, params: Any, many: bool,
              context: Any) -> Any:
        if sql.lstrip().upper().startswith("DELETE") and table in sql:
            lines = export.read_text().splitlines() if export.exists() else []
            on_disk_at_delete.append([json.loads(line)["id"] for line in lines])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        report = prune(now=LATER, kinds=["audit"], export_audit=str(export))

    assert report.removed["audit"] == 7 and report.exported == 7
    assert not AuditEntry.objects.exists()
    # Every DELETE of audit rows found the rows of its batch (and those before) written.
    assert len(on_disk_at_delete) == report.batches >= 2
    assert on_disk_at_delete[0] == ids[:3]
    assert on_disk_at_delete[-1] == ids
    written = [json.loads(line) for line in export.read_text().splitlines()]
    assert [e["id"] for e in written] == ids
    assert {e["at"] for e in written} == {"2020-01-15T10:00:00+00:00"}


def test_an_export_that_cannot_be_written_keeps_the_entries(tmp_path: Path) -> None:
    ids = old_entries(3)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the export's folder would be\n")

    report = prune(now=LATER, kinds=["audit"], export_audit=str(blocker / "audit.jsonl"))

    assert report.removed["audit"] == 0 and report.exported == 0
    assert len(report.errors) == 1 and report.errors[0].startswith("audit: ")
    assert sorted(AuditEntry.objects.values_list("pk", flat=True)) == ids


def test_the_default_export_is_monthly_files_in_qa_audit_export(tmp_path: Path,
                                                                 settings: Any) -> None:
    settings.AUDIT_EXPORT = str(tmp_path / "audit")
    ids = old_entries(2)
    newer = AuditEntry.objects.create(actor="bob", source="console", action="cancel", queue="q")
    AuditEntry.objects.filter(pk=newer.pk).update(at=datetime(2020, 2, 3, tzinfo=UTC))

    report = prune(now=LATER, kinds=["audit"])

    assert report.exported == 3 and not AuditEntry.objects.exists()
    january = (tmp_path / "audit" / "audit-2020-01.jsonl").read_text().splitlines()
    february = (tmp_path / "audit" / "audit-2020-02.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in january] == ids
    assert [json.loads(line)["actor"] for line in february] == ["bob"]

"""The pruner (issue 35, item 2): each kind's rows older than its retention go, per queue, in
keyset batches, each its own short transaction; what is still live (unfinished requests, dead
letters still dead, running bulk actions, the metrics the mirror may still add to) and the
totals stay. Real redis-server and database (SQLite, or PostgreSQL with DATABASE_URL)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.mirror import retention_prune
from core.mirror.metrics import roll
from core.mirror.retention import DAY, Policy, Value, load
from core.mirror.retention_prune import prune
from core.models import (
    AuditEntry,
    BulkAction,
    DeadLetter,
    HandlerHour,
    HandlerMinute,
    HandlerTotal,
    MetricsCursor,
    Request,
    RequestEvent,
    RetentionSetting,
    SearchDoc,
)
from core.queue import Queue
from tests.conftest import FakeClock
from tests.mirror_support import finish, mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]


def at(clock: FakeClock, days: float = 0.0) -> datetime:
    """The test clock's now, `days` later."""
    return datetime.fromtimestamp(clock.now / 1000, UTC) + timedelta(days=days)


def later(clock: FakeClock, days: float) -> datetime:
    """`days` after both the test clock and the Redis server's (stream ids are its)."""
    return max(at(clock), datetime.now(UTC)) + timedelta(days=days)


def rows(model: Any, **filters: Any) -> int:
    return int(model.objects.filter(**filters).count())


def other(queue: Queue, name: str, clock: FakeClock) -> Queue:
    return Queue(queue.redis, name, prefix=queue.keys.prefix, clock=clock)


def test_finished_requests_go_with_their_timelines_unfinished_ones_stay(
        queue: Queue, clock: FakeClock) -> None:
    queue.submit([1, 2], request_id="done-1", handler="h")
    queue.submit([1], request_id="failed-1", handler="h", max_attempts=1)
    finish(queue, fail=True)  # failed-1's task, and done-1's, fail: both finish failed
    queue.submit([1], request_id="done-2", handler="h")
    finish(queue)
    queue.submit([1, 2, 3], request_id="running", handler="h")
    mirror(queue)
    assert rows(RequestEvent, request_id="done-1") > 0
    assert rows(RequestEvent, request_id="running") > 0

    report = prune(now=at(clock, 31), kinds=["requests"])

    assert set(Request.objects.values_list("request_id", flat=True)) == {"running"}
    assert rows(RequestEvent, request_id="running") > 0
    assert rows(RequestEvent) == rows(RequestEvent, request_id="running")
    assert report.removed["requests"] == 3 and report.removed["request-events"] > 3
    # A day earlier, nothing of them was old enough.
    queue.submit([1], request_id="done-3", handler="h")
    finish(queue)
    mirror(queue)
    assert prune(now=at(clock, 29), kinds=["requests"]).removed["requests"] == 0


def test_each_queue_keeps_its_own_retention(queue: Queue, clock: FakeClock) -> None:
    short = other(queue, "short", clock)
    for q in (queue, short):
        q.submit([1], request_id="r", handler="h")
        finish(q)
        mirror(q)
    RetentionSetting.objects.create(kind="requests", queue="short", seconds=DAY)

    prune(now=at(clock, 2), kinds=["requests", "search"])

    assert list(Request.objects.values_list("queue", flat=True)) == ["q"]
    assert rows(SearchDoc, queue="q") == 1 and rows(SearchDoc, queue="short") == 1
    # The setting for every queue: "q" (no setting of its own) follows it, "short" keeps its.
    RetentionSetting.objects.create(kind="search", queue="", seconds=3600)
    RetentionSetting.objects.create(kind="search", queue="short", seconds=None)  # forever
    prune(now=at(clock, 2), kinds=["search"])
    assert list(SearchDoc.objects.values_list("queue", flat=True)) == ["short"]


def test_resolved_dead_letters_go_still_dead_ones_stay(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1, 2, 3], request_id="bad", handler="h", max_attempts=1)
    finish(queue, fail=True)
    mirror(queue)
    first, second, third = DeadLetter.objects.order_by("entry_id").values_list("entry_id",
                                                                               flat=True)
    queue.requeue([first])
    queue.delete_dead([second])
    mirror(queue)
    assert rows(DeadLetter, resolution="") == 1

    prune(now=later(clock, 31), kinds=["dead"])

    assert list(DeadLetter.objects.values_list("entry_id", flat=True)) == [third]


def test_audit_entries_are_written_out_before_they_go(queue: Queue, clock: FakeClock,
                                                       tmp_path: Path, settings: Any) -> None:
    settings.AUDIT_EXPORT = str(tmp_path / "audit")
    old = [AuditEntry.objects.create(actor=f"alice{i}", source="cli", action="requeue",
                                     queue="q", target=f"d{i}", count=1) for i in range(3)]
    AuditEntry.objects.filter(pk__in=[e.pk for e in old]).update(
        at=datetime(2020, 1, 15, 10, 0, tzinfo=UTC))
    recent = AuditEntry.objects.create(actor="bob", source="console", action="cancel",
                                       queue="q", target="r1", count=1)

    report = prune(now=datetime(2021, 3, 1, tzinfo=UTC), kinds=["audit"])

    assert list(AuditEntry.objects.values_list("pk", flat=True)) == [recent.pk]
    assert report.removed["audit"] == 3 and report.exported == 3
    lines = (tmp_path / "audit" / "audit-2020-01.jsonl").read_text().splitlines()
    written = [json.loads(line) for line in lines]
    assert [e["id"] for e in written] == [e.pk for e in old]
    assert written[0]["actor"] == "alice0" and written[0]["target"] == "d0"
    assert written[0]["at"] == "2020-01-15T10:00:00+00:00"
    assert (tmp_path / "audit" / "audit-2020-01.jsonl").stat().st_mode & 0o077 == 0


def test_no_copy_when_the_export_is_off(queue: Queue, settings: Any, tmp_path: Path) -> None:
    settings.AUDIT_EXPORT = "off"
    e = AuditEntry.objects.create(actor="a", source="cli", action="pause", queue="q")
    AuditEntry.objects.filter(pk=e.pk).update(at=datetime(2020, 1, 1, tzinfo=UTC))

    report = prune(now=datetime(2022, 1, 1, tzinfo=UTC), kinds=["audit"])

    assert report.removed["audit"] == 1 and report.exported == 0


def test_finished_bulk_actions_go_their_audit_entries_stay(queue: Queue) -> None:
    long_ago = datetime(2020, 1, 1, tzinfo=UTC)
    done = BulkAction.objects.create(action="requeue", queue="q", status="done", count=2)
    preview = BulkAction.objects.create(action="requeue", queue="q", status="previewed")
    running = BulkAction.objects.create(action="requeue", queue="q", status="running")
    BulkAction.objects.filter(pk__in=[done.pk, preview.pk, running.pk]).update(
        created_at=long_ago)
    BulkAction.objects.filter(pk=done.pk).update(finished_at=long_ago)
    entry = AuditEntry.objects.create(actor="a", source="console", action="requeue", queue="q",
                                      bulk=done)

    prune(now=datetime(2020, 6, 1, tzinfo=UTC), kinds=["bulk"])

    assert list(BulkAction.objects.values_list("pk", flat=True)) == [running.pk]
    entry.refresh_from_db()
    assert entry.bulk_id is None


def test_handler_minutes_and_hours_go_but_not_what_the_mirror_still_adds_to(
        queue: Queue, clock: FakeClock) -> None:
    now = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
    for minutes_ago in (10, 60 * 24, 60 * 26):
        HandlerMinute.objects.create(queue="q", handler="h", minute=now - timedelta(
            minutes=minutes_ago), done=1)
    for days_ago in (1, 89, 91):
        HandlerHour.objects.create(queue="q", handler="h", hour=now - timedelta(days=days_ago),
                                   done=1)
    HandlerTotal.objects.create(queue="q", handler="h", done=6)
    MetricsCursor.objects.create(queue="q", minute=int(now.timestamp()) // 60)

    report = prune(now=now, kinds=["handler-minutes", "handler-hours"])

    assert (report.removed["handler-minutes"], report.removed["handler-hours"]) == (1, 1)
    assert HandlerTotal.objects.get().done == 6  # the totals stay: they are counters


def test_the_minutes_the_next_roll_reads_again_stay_however_short_the_retention(
        queue: Queue, clock: FakeClock) -> None:
    # Pruned, such a minute would be counted twice into the hours and the totals.
    queue.submit([1, 2], handler="h")
    finish(queue)
    roll(queue)
    short = Policy({k: Value(1, "test") for k in load().defaults})
    prune(now=at(clock, 10), policy=short, kinds=["handler-minutes", "handler-hours"])
    assert rows(HandlerMinute, minute__gte=at(clock).replace(second=0, microsecond=0)) == 1
    queue.submit([1], handler="h")
    finish(queue)
    roll(queue)
    assert HandlerTotal.objects.get(queue="q", handler="h").done == 3


def test_data_jobs_go_with_their_chunks_running_ones_stay(queue: Queue) -> None:
    from core.models import DataJob, DataJobChunk  # issue 35's data jobs (core/models/datajobs)

    long_ago = datetime(2020, 1, 1, tzinfo=UTC)
    common = {"queue": "q", "spec": "{}", "created_at": long_ago, "updated_at": long_ago}
    done = DataJob.objects.create(job_id="j1", state="done", finished_at=long_ago, **common)
    running = DataJob.objects.create(job_id="j2", state="running", **common)
    for job in (done, running):
        DataJobChunk.objects.create(job=job, chunk=0, state="done")

    prune(now=datetime(2021, 1, 1, tzinfo=UTC), kinds=["datajobs"])

    assert list(DataJob.objects.values_list("job_id", flat=True)) == ["j2"]
    assert list(DataJobChunk.objects.values_list("job_id", flat=True)) == [running.pk]


def test_batches_are_keyset_ranges_each_its_own_short_transaction(
        queue: Queue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retention_prune, "BATCH_FIRST", 40)
    monkeypatch.setattr(retention_prune, "BATCH_MAX", 40)
    for i in range(5):
        queue.submit([{"n": j} for j in range(50)], request_id=f"big-{i}", handler="h")
        clock.advance(1000)
    for i in range(200):
        queue.submit([1], request_id=f"r{i}", handler="h")
        clock.advance(7)
    finish(queue)
    mirror(queue)

    with CaptureQueriesContext(connection) as seen:
        report = prune(now=at(clock, 31), kinds=["requests", "search"])

    assert report.removed["requests"] == 205 and rows(Request) == 0 and rows(SearchDoc) == 0
    assert rows(RequestEvent) == 0
    assert report.batches >= 2 * 205 // 40
    assert 0 < report.longest_ms < 100, report.longest_at
    sql = [q["sql"].upper() for q in seen.captured_queries]
    assert not any("OFFSET" in s for s in sql)
    # No rows of the tables come into Python: the reads are one queue name (an index probe)
    # or one batch's last key.
    reads = [s for s in sql if s.startswith("SELECT") and "CORE_REQUEST" in s]
    assert reads and all(s.startswith("SELECT MIN(QUEUE)") or s.endswith("LIMIT 1")
                         for s in reads), reads


def test_a_stop_ends_a_pass_between_batches(queue: Queue, clock: FakeClock,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    monkeypatch.setattr(retention_prune, "BATCH_FIRST", 10)
    monkeypatch.setattr(retention_prune, "BATCH_MAX", 10)
    for i in range(50):
        queue.submit([1], request_id=f"r{i}", handler="h")
        clock.advance(5)
    finish(queue)
    mirror(queue)
    stop = threading.Event()
    calls = 0
    real = retention_prune.Batches._timed

    def timed(self: Any, ms: float, label: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            stop.set()
        real(self, ms, label)

    monkeypatch.setattr(retention_prune.Batches, "_timed", timed)
    report = prune(now=at(clock, 31), kinds=["requests"], stop=stop)

    assert report.removed["requests"] == 20 and rows(Request) == 30


def test_forever_keeps_everything(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1], request_id="r", handler="h")
    finish(queue)
    mirror(queue)
    RetentionSetting.objects.create(kind="requests", queue="", seconds=None)

    assert prune(now=at(clock, 10_000), kinds=["requests"]).removed["requests"] == 0
    assert rows(Request) == 1


def test_a_pass_is_recorded(queue: Queue, clock: FakeClock) -> None:
    from core.models import PruneRun

    queue.submit([1], request_id="r", handler="h")
    finish(queue)
    mirror(queue)
    report = prune(now=at(clock, 31))
    run = retention_prune.record(report, started=at(clock, 31), source="cli")

    assert PruneRun.objects.get() == run
    assert run.removed["requests"] == 1 and run.batches >= 1

"""Recurring schedules in the database (issue 19: "and in the database mirror for history"):
the mirror keeps a row per schedule, current and cheap when nothing changed, kept with
`removed_at` when the schedule goes; `manage.py schedule restore` declares again what Redis
lost. On SQLite, and on PostgreSQL when DATABASE_URL names it (TEST_POSTGRES_URL)."""

from __future__ import annotations

import io
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.conf import get_queue
from core.mirror.schedules import mirror_schedules
from core.models import AuditEntry, ScheduleRecord
from core.ops import schedules as ops
from core.ops.audit import Actor
from core.queue import Queue
from core.queue.schedule import fire
from core.queue.schedule.api import declare, every
from core.queue.schedule.spec import Schedule
from core.queue.schedule.store import Schedules
from tests.conftest import FakeClock, keys_under
from tests.console_support import ensure_groups
from tests.mirror_support import mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]
MIN = 60_000
ADMIN = Actor("os:test", None, "cli")


def hourly(name: str = "hourly", **kw: Any) -> Schedule:
    fields: dict[str, Any] = {"handler": "h", "tasks": [{"n": 1}], "every_s": 3600}
    return Schedule(name=name, **(fields | kw))


def row(queue: Queue, name: str) -> ScheduleRecord:
    return ScheduleRecord.objects.get(queue=queue.name, name=name)


def lose_redis_data(client: redis.Redis, prefix: str) -> None:
    """What a Redis without persistence does on a restart: every key of the test is gone."""
    keys = keys_under(client, prefix)
    if keys:
        client.delete(*keys)


def test_the_mirror_keeps_a_row_per_schedule_current(queue: Queue, clock: FakeClock) -> None:
    store = Schedules(queue)
    declare(queue, hourly(), every("poll", "10m", handler="p", tasks=[{}]))
    synced = mirror_schedules(queue)
    assert (synced.created, synced.changed, synced.followed, synced.removed) == (2, 0, 0, 0)
    r = row(queue, "hourly")
    state = store.require("hourly")
    assert r.definition == asdict(state.schedule)
    assert (r.version, r.paused, r.fired, r.removed_at) == (1, False, 0, None)
    assert r.next_run == datetime.fromtimestamp(state.next_ms / 1000, tz=UTC)  # type: ignore[operator]
    assert r.created_at == r.updated_at == datetime.fromtimestamp(clock.now / 1000, tz=UTC)

    # A slot fires: the row follows its next slot and counters, the definition is not read.
    clock.advance(3600_000)
    assert fire.tick(store, clock.now).fired == 2  # hourly, and poll once (missed: latest)
    synced = mirror_schedules(queue)
    assert (synced.created, synced.changed, synced.followed) == (0, 0, 2)
    r = row(queue, "hourly")
    state = store.require("hourly")
    assert (r.fired, r.version) == (1, 1)
    assert r.last_slot == datetime.fromtimestamp(state.last_slot / 1000, tz=UTC)  # type: ignore[operator]
    assert r.next_run == datetime.fromtimestamp(state.next_ms / 1000, tz=UTC)  # type: ignore[operator]

    # Paused, then edited: each a new version.
    store.pause("hourly", by="alice")
    mirror_schedules(queue)
    r = row(queue, "hourly")
    assert (r.paused, r.paused_by, r.next_run, r.version) == (True, "alice", None, 2)
    clock.advance(1000)
    store.upsert(hourly(queue="q", every_s=7200))
    assert mirror_schedules(queue).changed == 1
    r = row(queue, "hourly")
    assert (r.definition["every_s"], r.version) == (7200, 3)
    assert r.updated_at == datetime.fromtimestamp(clock.now / 1000, tz=UTC)
    assert r.created_at < r.updated_at


def test_nothing_changed_means_one_select_and_no_write(queue: Queue) -> None:
    declare(queue, *[hourly(f"s{i}") for i in range(20)])
    mirror_schedules(queue)
    before = list(ScheduleRecord.objects.order_by("name").values())
    with CaptureQueriesContext(connection) as ctx:
        synced = mirror_schedules(queue)
    assert (synced.created, synced.changed, synced.followed, synced.removed) == (0, 0, 0, 0)
    writes = [q["sql"] for q in ctx.captured_queries
              if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))]
    assert writes == []
    assert len([q for q in ctx.captured_queries if "SELECT" in q["sql"].upper()]) == 1
    assert list(ScheduleRecord.objects.order_by("name").values()) == before


def test_a_removed_schedule_keeps_its_row_with_when_and_by_whom(django_queue: Queue) -> None:
    store = Schedules(django_queue)
    declare(django_queue, hourly("a"), hourly("b"), hourly("c"))
    mirror_schedules(django_queue)
    ops.remove(ADMIN, "default", "a")  # through the service layer: who removed it is kept
    store.remove("b")  # not through it (as if Redis lost it): only when it went
    # "c" removed through the service layer before the mirror ever saw it: a row all the same
    declare(django_queue, hourly("d"))
    ops.remove(ADMIN, "default", "d")
    synced = mirror_schedules(django_queue)
    assert synced.removed == 1
    a, b, c, d = (row(django_queue, n) for n in "abcd")
    assert (a.removed_by, b.removed_by, c.removed_at, d.removed_by) == (
        "os:test", "", None, "os:test")
    assert a.removed_at is not None and b.removed_at is not None and d.removed_at is not None
    assert d.definition["every_s"] == 3600
    # Replaying changes nothing; a schedule created again under a removed name is a new one.
    assert mirror_schedules(django_queue).removed == 0
    declare(django_queue, hourly("a", every_s=60))
    mirror_schedules(django_queue)
    a2 = row(django_queue, "a")
    assert (a2.removed_at, a2.removed_by, a2.definition["every_s"]) == (None, "", 60)


def test_a_mirror_pass_that_read_redis_before_a_removal_does_not_undo_it(
        django_queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    declare(django_queue, hourly("a"))
    mirror_schedules(django_queue)
    store = Schedules(django_queue)
    store.pause("a")  # a change the mirror has not seen yet
    heads = store.heads()  # the mirror reads Redis here ...
    ops.remove(ADMIN, "default", "a")  # ... an operator removes the schedule ...
    # ... and the mirror goes on with what it read (this interleaving, made certain).
    monkeypatch.setattr(Schedules, "heads", lambda self: heads)
    mirror_schedules(django_queue)
    a = row(django_queue, "a")
    assert (a.removed_by, a.removed_at is not None) == ("os:test", True)


def test_the_mirror_loop_mirrors_schedules(queue: Queue) -> None:
    declare(queue, hourly())
    mirror(queue)
    assert row(queue, "hourly").version == 1


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("schedule", *args, stdout=out)
    return out.getvalue()


def test_restore_declares_again_what_redis_lost(
        django_queue: Queue, redis_client: redis.Redis, prefix: str) -> None:
    other = get_queue("other")
    run("add", "nightly", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--handler", "agg",
        '{"day": "yesterday"}', "--priority", "70")
    run("add", "poll", "--every", "10m", "--handler", "poll", "{}")
    run("add", "gone", "--every", "1h", "--handler", "h", "{}")
    run("add", "elsewhere", "--every", "1h", "--handler", "h", "{}", "-q", "other")
    run("pause", "poll")
    mirror_schedules(django_queue)
    mirror_schedules(other)
    run("remove", "gone")  # removed on purpose: stays removed
    created = row(django_queue, "nightly").created_at
    assert "nothing to restore" in run("restore")

    lose_redis_data(redis_client, prefix)
    assert Schedules(django_queue).names() == [] == Schedules(other).names()
    # The mirror notices before anyone restores: the rows say when, and nobody removed them.
    assert mirror_schedules(django_queue).removed == 2
    # Meanwhile a deploy declared "nightly" again, changed: restore never overwrites it.
    declare(django_queue, Schedule(name="nightly", cron="0 3 * * *", handler="agg",
                                   tasks=[{}]))

    entries = AuditEntry.objects.count()
    dry = run("restore", "--dry-run")
    assert "would restore schedule poll in queue default (paused, as it was)" in dry
    assert "would restore schedule elsewhere in queue other" in dry
    assert "nightly" not in dry and "gone" not in dry
    assert "2 schedule(s) would be restored; nothing done" in dry
    assert Schedules(django_queue).names() == ["nightly"]
    assert AuditEntry.objects.count() == entries + 2  # one per queue, as dry runs

    assert run("restore", "-q", "other") == "restored schedule elsewhere in queue other\n"
    out = run("restore")
    assert out == "restored schedule poll in queue default (paused, as it was)\n"
    store = Schedules(django_queue)
    poll = store.require("poll")
    assert (poll.paused, poll.schedule.every_s) == (True, 600)
    assert poll.paused_by.startswith("os:")  # who paused it before Redis lost it
    assert store.require("nightly").schedule.cron == "0 3 * * *"
    assert Schedules(other).require("elsewhere").next_ms is not None
    assert "gone" not in store.names()
    restores = AuditEntry.objects.filter(action="schedule-restore", refused=False,
                                         acted=1).values_list("queue", "target")
    assert sorted(restores) == [("default", "schedule poll"), ("other", "schedule elsewhere")]
    assert "nothing to restore" in run("restore")

    # The mirror's rows follow: back, not removed, first created when they were.
    mirror_schedules(django_queue)
    p = row(django_queue, "poll")
    assert (p.removed_at, p.removed_by, p.paused) == (None, "", True)
    n = row(django_queue, "nightly")
    assert n.created_at == created and n.definition["cron"] == "0 3 * * *"
    assert row(django_queue, "gone").removed_by.startswith("os:")


def test_restore_needs_the_admins_permission(django_queue: Queue, redis_client: redis.Redis,
                                             prefix: str) -> None:
    from django.contrib.auth.models import Group, User

    run("add", "poll", "--every", "10m", "--handler", "poll", "{}")
    mirror_schedules(django_queue)
    lose_redis_data(redis_client, prefix)
    ensure_groups()  # an earlier test that flushed the database took the migrations' rows
    op = User.objects.create_user("op", password="x")
    op.groups.add(Group.objects.get(name="operator"))
    with pytest.raises(CommandError, match=r"needs the permission core\.change_schedule"):
        call_command("schedule", "restore", "--as", "op", stdout=io.StringIO())
    assert Schedules(django_queue).names() == []
    assert AuditEntry.objects.filter(action="schedule-restore", refused=True).count() == 1
    with pytest.raises(CommandError) as err:
        run("restore", "-q", "no such")
    assert "queue name" in str(err.value)

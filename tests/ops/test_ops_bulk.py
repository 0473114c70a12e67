"""Bulk actions (core.ops.bulk and the runner): the preview's snapshot is what is acted on,
typed confirmation above 1,000, one confirm, stop midway with counts that add up, the rate
limit, Redis down, and the 20,000-letter requeue with letters arriving during the preview."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from core.models import AuditEntry, BulkAction, DeadLetter, Request
from core.ops import bulk
from core.ops.errors import BadInput, Refused
from core.ops.runner import RunnerState, run_actions, step
from core.queue import Queue, RedisUnavailable, read
from tests.mirror_support import mirror
from tests.ops_support import dead_letters, fingerprint_of, last_audit, still_dead

pytestmark = pytest.mark.django_db


@pytest.fixture
def q(django_queue: Queue) -> Queue:
    return django_queue


def test_preview_takes_a_snapshot_and_describes_it(q: Queue, operator_user: User) -> None:
    ids = dead_letters(q, 5)
    dead_letters(q, 2, rid="other", handler="mail", error="KeyError: 'x'")
    fp = fingerprint_of(q, "bad")
    made = bulk.preview(operator_user, "requeue", q.name, {"fingerprint": fp, "handler": "spark"})
    assert made.status == "previewed" and made.count == 5
    assert made.target_ids == ids
    assert made.description == f"requeue 5 dead letters of fingerprint={fp}, handler=spark"
    assert len(made.sample) == 5 and made.sample[0]["id"] == ids[0]
    assert not made.needs_typed_count and made.actor_name == "otto"
    # A preview acts on nothing, and says who looked at what: one entry, linked to it.
    [entry] = AuditEntry.objects.all()
    assert (entry.action, entry.actor, entry.queue, entry.count, entry.acted) == (
        "preview", "otto", q.name, 5, 0)
    assert entry.bulk_id == made.pk and entry.target == f"bulk action #{made.pk}: " + \
        made.description and not entry.refused
    assert still_dead(q, ids) == 5


def test_preview_refuses_bad_filters_and_users_without_the_permission(
    q: Queue, operator_user: User, viewer_user: User
) -> None:
    with pytest.raises(BadInput, match="unknown filter"):
        bulk.preview(operator_user, "requeue", q.name, {"colour": "red"})
    with pytest.raises(BadInput, match="since"):
        bulk.preview(operator_user, "requeue", q.name, {"since": "yesterday"})
    with pytest.raises(BadInput, match="action"):
        bulk.preview(operator_user, "explode", q.name, {})
    with pytest.raises(BadInput, match="priority"):
        bulk.preview(operator_user, "cancel", q.name, {"priority": "500"})
    with pytest.raises(Refused):
        bulk.preview(viewer_user, "requeue", q.name, {})
    assert last_audit().refused
    with pytest.raises(Refused):
        bulk.preview(operator_user, "delete", q.name, {})


def _fake_letters(queue: str, n: int, fp: str = "f" * 40) -> None:
    now = timezone.now()
    DeadLetter.objects.bulk_create(
        DeadLetter(queue=queue, entry_id=f"{1_000 + i}-0", request_id="gone", task_id=f"1-{i}",
                   handler="h", dead_at=now - dt.timedelta(seconds=i), fingerprint=fp)
        for i in range(n)
    )


def test_more_than_1000_needs_the_count_typed_and_one_confirm_wins(
    q: Queue, operator_user: User
) -> None:
    _fake_letters(q.name, 1001)
    made = bulk.preview(operator_user, "requeue", q.name, {})
    assert made.needs_typed_count and made.count == 1001
    with pytest.raises(BadInput, match="type the number"):
        bulk.confirm(operator_user, made.pk)
    with pytest.raises(BadInput):
        bulk.confirm(operator_user, made.pk, typed_count="1000")
    with pytest.raises(BadInput, match="rate"):
        bulk.confirm(operator_user, made.pk, typed_count="1,001", rate_per_s=0)
    started = bulk.confirm(operator_user, made.pk, typed_count="1,001", rate_per_s=200)
    assert started.status == "running" and not started.already_confirmed
    assert started.rate_per_s == 200
    again = bulk.confirm(operator_user, made.pk, typed_count="1,001")
    assert again.already_confirmed and again.status == "running"
    assert AuditEntry.objects.filter(bulk=made, action="requeue").count() == 1


def test_the_runner_acts_on_the_snapshot_and_audits_one_entry(
    q: Queue, operator_user: User
) -> None:
    ids = dead_letters(q, 30)
    made = bulk.preview(operator_user, "requeue", q.name, {"request": "bad"})
    q.requeue(ids[:5])  # someone else got there first: skipped, not requeued twice
    bulk.confirm(operator_user, made.pk)
    call_command("runactions", "--burst")
    b = bulk.get(made.pk)
    assert (b.status, b.acted, b.skipped, b.position) == ("done", 25, 5, 30)
    assert b.progress_percent == 100 and b.finished_at is not None
    entry = AuditEntry.objects.get(bulk=made, action="requeue")
    assert (entry.count, entry.acted, entry.skipped, entry.target) == (30, 25, 5,
                                                                       made.description)
    assert still_dead(q, ids) == 0


def test_stopping_midway_leaves_counts_that_add_up(q: Queue, admin_role_user: User) -> None:
    ids = dead_letters(q, 2500)
    made = bulk.preview(admin_role_user, "delete", q.name, {})
    bulk.confirm(admin_role_user, made.pk, typed_count="2500")
    b = BulkAction.objects.get(pk=made.pk)
    state = RunnerState()
    assert step(b, state)  # one chunk of 1,000
    stopping = bulk.stop(admin_role_user, made.pk)
    assert stopping.status == "stopping"
    assert step(b, state)
    b = bulk.get(made.pk)
    assert (b.status, b.position, b.acted, b.skipped) == ("stopped", 1000, 1000, 0)
    entry = AuditEntry.objects.get(bulk=made, action="delete")
    assert (entry.count, entry.acted + entry.skipped) == (2500, 1000)
    stop = AuditEntry.objects.get(bulk=made, action="stop")  # who stopped it, on its own
    assert (stop.actor, stop.acted, stop.refused) == ("ada", 1, False)
    assert still_dead(q, ids) == 1500
    assert still_dead(q, ids[:1000]) == 0  # the snapshot's order: oldest first


def test_a_preview_never_confirmed_stops_at_once(q: Queue, operator_user: User) -> None:
    dead_letters(q, 2)
    made = bulk.preview(operator_user, "requeue", q.name, {})
    assert bulk.stop(operator_user, made.pk).status == "stopped"
    assert bulk.confirm(operator_user, made.pk).already_confirmed


def test_the_rate_limit_spaces_the_chunks(q: Queue, operator_user: User) -> None:
    dead_letters(q, 30)
    made = bulk.preview(operator_user, "requeue", q.name, {})
    bulk.confirm(operator_user, made.pk, rate_per_s=10)
    b = BulkAction.objects.get(pk=made.pk)
    now = [100.0]
    state = RunnerState()
    assert step(b, state, clock=lambda: now[0])
    assert b.position == 10
    assert not step(b, state, clock=lambda: now[0])  # not due yet: 10 at 10/s
    now[0] += 0.99
    assert not step(b, state, clock=lambda: now[0])
    now[0] += 0.02
    assert step(b, state, clock=lambda: now[0]) and b.position == 20


def test_bulk_cancel_snapshots_requests_from_the_history(q: Queue, operator_user: User) -> None:
    for i in range(3):
        q.submit([1, 2], request_id=f"r{i}", handler="h", tenant="acme" if i < 2 else "other")
    mirror(q)
    made = bulk.preview(operator_user, "cancel", q.name, {"tenant": "acme"})
    assert made.count == 2 and {s["id"] for s in made.sample} == {"r0", "r1"}
    bulk.confirm(operator_user, made.pk)
    call_command("runactions", "--burst")
    assert bulk.get(made.pk).acted == 2
    assert [q.state(f"r{i}") for i in range(3)] == ["cancelled", "cancelled", "active"]
    with pytest.raises(BadInput, match="unfinished"):
        bulk.preview(operator_user, "cancel", q.name, {"state": "done"})
    assert Request.objects.filter(queue=q.name).count() == 3


def test_redis_down_leaves_the_bulk_action_where_it_was(
    settings: Any, q: Queue, operator_user: User
) -> None:
    dead_letters(q, 3)
    made = bulk.preview(operator_user, "requeue", q.name, {})
    bulk.confirm(operator_user, made.pk)
    from core.stack.redis_server import free_port

    good = settings.REDIS_URL
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(RedisUnavailable):
        run_actions(burst=True)
    b = bulk.get(made.pk)
    assert (b.status, b.position, b.acted) == ("running", 0, 0)
    settings.REDIS_URL = good
    run_actions(burst=True)
    assert bulk.get(made.pk).acted == 3


@pytest.mark.slow
def test_requeue_of_20000_acts_on_exactly_the_previewed_snapshot(
    q: Queue, operator_user: User
) -> None:
    ids = dead_letters(q, 20_000)
    fp = fingerprint_of(q, "bad")
    made = bulk.preview(operator_user, "requeue", q.name, {"fingerprint": fp})
    assert made.count == 20_000 and made.needs_typed_count
    # New letters of the same group arrive after the preview (and are mirrored).
    late = dead_letters(q, 300, rid="late")
    assert fingerprint_of(q, "late") == fp
    bulk.confirm(operator_user, made.pk, typed_count="20,000")
    run_actions(burst=True)
    b = bulk.get(made.pk)
    assert (b.status, b.acted, b.skipped) == ("done", 20_000, 0)
    assert still_dead(q, ids) == 0
    assert still_dead(q, late) == 300  # not in the snapshot: untouched
    info = read.request(q, "bad")
    assert info is not None and (info.dead, info.waiting) == (0, 20_000)
    entry = AuditEntry.objects.get(bulk=made, action="requeue")
    assert (entry.count, entry.acted, entry.skipped) == (20_000, 20_000, 0)

"""The service layer's direct actions (core.ops.actions): success, the permission refusal
(audited), the stale-state refusal (a double click, a page out of date), bad input, Redis down
(a clear error, nothing reported done that was not)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.auth.models import User

from core.models import AuditEntry, Request
from core.ops import actions, audit
from core.ops.actions import PendingRef
from core.ops.errors import BadInput, Refused, StaleState
from core.ops.perms import allowed
from core.queue import Queue, RedisUnavailable, read
from tests.mirror_support import mirror
from tests.ops_support import CLI, dead_letters, last_audit, still_dead

pytestmark = pytest.mark.django_db


@pytest.fixture
def q(django_queue: Queue) -> Queue:
    return django_queue


def test_allowed_shows_each_role_its_buttons(
    operator_user: User, viewer_user: User, admin_role_user: User
) -> None:
    assert allowed(viewer_user) == dict.fromkeys(
        ("requeue", "delete", "cancel", "claim", "pause", "schedule_run", "schedule_change",
         "control", "retention", "alerts", "limits"), False)
    assert allowed(operator_user) == {"requeue": True, "delete": False, "cancel": True,
                                      "claim": True, "pause": False, "schedule_run": True,
                                      "schedule_change": False, "control": False,
                                      "retention": False, "alerts": False, "limits": False}
    assert all(allowed(admin_role_user).values())
    assert not any(allowed(None).values())


def test_requeue_acts_once_and_a_double_click_is_skipped(q: Queue, operator_user: User) -> None:
    ids = dead_letters(q, 3)
    result = actions.requeue_dead(operator_user, q.name, ids)
    assert (result.acted, result.skipped) == (3, 0)
    assert result.message == "requeued 3 of 3; 0 skipped"
    assert q.state("bad") == "active"  # the failed request reopened
    entry = AuditEntry.objects.get(pk=result.audit_id)
    assert (entry.actor, entry.user, entry.source, entry.action) == ("otto", operator_user,
                                                                     "console", "requeue")
    assert (entry.count, entry.acted, entry.skipped, entry.refused) == (3, 3, 0, False)
    assert ids[0] in entry.target
    again = actions.requeue_dead(operator_user, q.name, ids)  # the same page, posted again
    assert (again.acted, again.skipped) == (0, 3)
    assert AuditEntry.objects.get(pk=again.audit_id).skipped == 3


def test_a_refusal_is_audited_and_changes_nothing(q: Queue, viewer_user: User,
                                                  operator_user: User) -> None:
    ids = dead_letters(q, 2)
    with pytest.raises(Refused):
        actions.requeue_dead(viewer_user, q.name, ids)
    entry = last_audit()
    assert entry.refused and entry.actor == "vera" and entry.action == "requeue"
    assert entry.count == 2 and entry.acted == 0
    assert still_dead(q, ids) == 2
    with pytest.raises(Refused):  # delete needs the admin group
        actions.delete_dead(operator_user, q.name, ids)
    with pytest.raises(Refused):
        actions.pause(operator_user, q.name)
    assert AuditEntry.objects.filter(refused=True).count() == 3
    assert still_dead(q, ids) == 2 and not q.paused()


@pytest.mark.parametrize("ids", [["not-an-id"], [], [f"{i}-0" for i in range(1, 1002)]],
                         ids=["malformed", "none", "over 1,000"])
def test_bad_ids_are_refused_before_anything(q: Queue, operator_user: User, ids: list[str]) -> None:
    with pytest.raises(BadInput):
        actions.requeue_dead(operator_user, q.name, ids)
    assert not AuditEntry.objects.exists()


def test_an_unknown_queue_is_bad_input(q: Queue, operator_user: User) -> None:
    with pytest.raises(BadInput, match="no queue named 'nope'"):
        actions.cancel(operator_user, "nope", ["r"])
    with pytest.raises(BadInput, match="invalid queue name"):
        actions.cancel(operator_user, "{bad}", ["r"])


def test_delete_counts_as_discarded_and_the_mirror_marks_the_letters(
    q: Queue, admin_role_user: User
) -> None:
    ids = dead_letters(q, 3)
    result = actions.delete_dead(admin_role_user, q.name, ids[:2])
    assert (result.acted, result.skipped) == (2, 0)
    assert actions.delete_dead(admin_role_user, q.name, ids[:2]).skipped == 2
    info = read.request(q, "bad")
    assert info is not None and (info.dead, info.discarded) == (1, 2)
    mirror(q)
    from core.models import DeadLetter

    rows = dict(DeadLetter.objects.filter(queue=q.name).values_list("entry_id", "resolution"))
    assert rows == {ids[0]: "deleted", ids[1]: "deleted", ids[2]: ""}
    assert Request.objects.get(queue=q.name, request_id="bad").discarded == 2


def test_requeue_request_and_its_refusals(q: Queue, operator_user: User) -> None:
    dead_letters(q, 4)
    result = actions.requeue_request(operator_user, q.name, "bad")
    assert result.acted == 4 and q.state("bad") == "active"
    with pytest.raises(BadInput, match="no request 'gone'"):
        actions.requeue_request(operator_user, q.name, "gone")
    q.cancel("bad")
    with pytest.raises(StaleState):
        actions.requeue_request(operator_user, q.name, "bad")
    assert last_audit().error  # the stale refusal is recorded too


def test_cancel_skips_what_was_cancelled_or_finished_already(q: Queue, operator_user: User) -> None:
    q.submit([1, 2], request_id="a", handler="h")
    q.submit([1], request_id="b", handler="h")
    q.open(request_id="empty", handler="h")
    [lease] = q.dequeue("w", 1)
    if lease.request_id == "b":
        q.ack(lease)
    result = actions.cancel(operator_user, q.name, ["a", "b", "empty", "never"])
    done_b = q.state("b") == "done"
    assert result.acted == (2 if done_b else 3)
    assert result.skipped == 4 - result.acted
    again = actions.cancel(operator_user, q.name, ["a", "empty"])
    assert (again.acted, again.skipped) == (0, 2)


def _beat(q: Queue, name: str, dead_after_ms: int = 10_000, tasks: Any = ()) -> None:
    q.heartbeat(name, {"dead_after_ms": dead_after_ms, "tasks": list(tasks)})


def test_claim_and_release_check_the_holder_and_idle_time_shown(
    q: Queue, operator_user: User
) -> None:
    q.submit([1, 2], request_id="r", handler="h", concurrency=2)
    leases = q.dequeue("w1", 2)
    _beat(q, "w2")
    entries = read.pending(q, "r")
    time.sleep(0.02)
    refs = [PendingRef("r", e.task_id, e.consumer, e.idle_ms) for e in entries]
    result = actions.claim(operator_user, q.name, refs[:1], "w2")
    assert (result.acted, result.skipped) == (1, 0)
    # The page, not reloaded, still shows w1 holding both: the one taken is skipped.
    result = actions.release(operator_user, q.name, refs)
    assert (result.acted, result.skipped) == (1, 1)
    # Both stay w1's until its runs stop (or their leases expire): none runs twice at once.
    assert all(e.consumer == "w1" and e.moves_by_ms for e in read.pending(q, "r"))
    assert q.release(leases) == [-1, -1]  # w1 stopped them
    holders = {e.task_id: e.consumer for e in read.pending(q, "r")}
    assert holders == {refs[0].task_id: "w2", refs[1].task_id: "~waiting"}
    with pytest.raises(BadInput, match="not a live worker"):
        actions.claim(operator_user, q.name, refs[:1], "ghost")
    with pytest.raises(BadInput):
        actions.release(operator_user, q.name, [PendingRef("r", "junk", "w1", 0)])


def test_reclaim_refuses_a_live_worker_and_a_second_click(q: Queue, operator_user: User) -> None:
    q.submit([1, 2], request_id="r", handler="h", concurrency=2)
    leases = q.ack_and_dequeue("old", 2, lease_ms=200)[1]
    q.heartbeat("old", {"dead_after_ms": 200}, leases, lease_ms=200)
    with pytest.raises(StaleState, match="beat within"):
        actions.reclaim_worker(operator_user, q.name, "old")
    time.sleep(0.25)
    result = actions.reclaim_worker(operator_user, q.name, "old")
    assert result.acted == 2
    assert [lease.attempt for lease in q.dequeue("new", 2)] == [1, 1]
    with pytest.raises(StaleState, match="not registered"):
        actions.reclaim_worker(operator_user, q.name, "old")
    assert AuditEntry.objects.filter(action="reclaim").count() == 3


def test_pause_and_resume_say_when_nothing_changed(q: Queue, admin_role_user: User) -> None:
    q.submit([1], request_id="r", handler="h")
    result = actions.pause(admin_role_user, q.name)
    assert result.acted == 1 and q.paused() and q.dequeue("w", 1) == []
    again = actions.pause(admin_role_user, q.name)
    assert (again.acted, again.skipped) == (0, 1) and "already paused" in again.message
    assert actions.resume(admin_role_user, q.name).acted == 1
    assert len(q.dequeue("w", 1)) == 1
    assert [e.action for e in audit.entries(user="ada")] == ["resume", "pause", "pause"]


def test_redis_down_is_a_clear_error_and_the_audit_says_nothing_was_done(
    settings: Any, q: Queue, operator_user: User
) -> None:
    from core.stack.redis_server import free_port

    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(RedisUnavailable):
        actions.requeue_dead(operator_user, "default", ["1-0"])
    entry = last_audit()
    assert entry.acted == 0 and "unreachable" in entry.error


def test_cli_actor_may_act_and_is_named_for_the_os_user(q: Queue) -> None:
    ids = dead_letters(q, 1)
    result = actions.requeue_dead(CLI, q.name, ids)
    assert result.acted == 1
    entry = last_audit()
    assert (entry.actor, entry.source, entry.user) == ("os:tester", "cli", None)


def test_audit_entries_page_newest_first_and_filter(q: Queue, operator_user: User) -> None:
    for _ in range(5):
        actions.cancel(operator_user, q.name, ["x"])
    actions.cancel(CLI, q.name, ["x"])
    page = audit.entries(limit=3)
    assert [e.actor for e in page] == ["os:tester", "otto", "otto"]
    rest = audit.entries(before_id=page[-1].id, limit=10)
    assert len(rest) == 3 and rest[0].id < page[-1].id
    assert len(audit.entries(user="otto", action="cancel")) == 5
    assert audit.entries(action="pause") == []

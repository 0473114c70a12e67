"""Operator actions on recurring schedules, for the console and `manage.py schedule`: each
checks its permission (operators run now, pause and resume; admins create, edit and delete),
acts through core.schedule's store, and writes one audit entry (a refusal too)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from core.queue import InvalidInput, QueueError, RedisUnavailable, StateChanged
from core.schedule.spec import Schedule
from core.schedule.store import Change, Schedules, UnknownSchedule

from . import audit
from .actions import check_permission, open_queue
from .audit import Actor
from .errors import BadInput, StaleState

T = TypeVar("T")


def store(queue: str) -> Schedules:
    """The schedules of `queue` (BadInput for a queue nobody has used)."""
    return Schedules(open_queue(queue))


def _act(actor: Actor, action: str, queue: str, name: str, fn: Callable[[], T],
         acted: Callable[[T], bool] = bool) -> T:
    target = f"schedule {name}"
    check_permission(actor, action, queue, target, 1)
    try:
        result = fn()
    except (InvalidInput, UnknownSchedule) as exc:
        audit.record(actor, action, queue, target=target, count=1, error=str(exc)[:500])
        raise BadInput(str(exc)) from None
    except StateChanged as exc:
        audit.record(actor, action, queue, target=target, count=1, error=str(exc)[:500])
        raise StaleState(str(exc)) from None
    except RedisUnavailable:
        audit.record(actor, action, queue, target=target, count=1, error="Redis unreachable")
        raise
    except QueueError as exc:
        audit.record(actor, action, queue, target=target, count=1, error=str(exc)[:500])
        raise
    ok = acted(result)
    audit.record(actor, action, queue, target=target, count=1, acted=int(ok),
                 skipped=int(not ok))
    return result


def save(actor: Actor, schedule: Schedule, *, mode: str = "upsert",
         expect_version: int | None = None) -> Change:
    """Create (mode "create"), change ("replace") or declare ("upsert") a schedule."""
    action = "schedule-add" if mode == "create" else "schedule-edit"
    st = Schedules(_queue_for_new(schedule.queue))
    return _act(actor, action, schedule.queue, schedule.name,
                lambda: st.upsert(schedule, mode=mode, expect_version=expect_version),
                lambda c: c.status != "unchanged")


def _queue_for_new(queue: str) -> Any:
    """A new schedule may name a queue nobody has used yet (its workers start later)."""
    from core.conf import get_queue
    from core.queue.keys import validate_id

    try:
        validate_id(queue, "queue name")
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None
    return get_queue(queue)


def remove(actor: Actor, queue: str, name: str) -> bool:
    return _act(actor, "schedule-remove", queue, name, lambda: store(queue).remove(name))


def pause(actor: Actor, queue: str, name: str) -> bool:
    return _act(actor, "schedule-pause", queue, name,
                lambda: store(queue).pause(name, by=actor.name))


def resume(actor: Actor, queue: str, name: str) -> bool:
    return _act(actor, "schedule-resume", queue, name, lambda: store(queue).resume(name))


def run_now(actor: Actor, queue: str, name: str) -> str:
    """Submit one run now; returns its request id."""
    return _act(actor, "schedule-run-now", queue, name,
                lambda: store(queue).run_now(name, by=actor.name))

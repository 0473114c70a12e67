"""Operator actions on recurring schedules, for the console and `manage.py schedule`: each
checks its permission (operators run now, pause and resume; admins create, edit, delete and
restore), acts through core.queue.schedule's store, and writes one audit entry (a refusal too)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from core.mirror.schedules import mark_removed
from core.models import ScheduleRecord
from core.queue import InvalidInput, QueueError, RedisUnavailable, StateChanged
from core.queue.schedule.spec import InvalidSchedule, Schedule
from core.queue.schedule.store import Change, Schedules, UnknownSchedule

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
    """Delete the schedule; its database row (the mirror's) keeps it, marked removed by the
    actor, so that `schedule restore` does not bring it back."""
    def act() -> bool:
        st = store(queue)
        was = st.get(name)
        removed = st.remove(name)
        if removed:
            mark_removed(queue, name, actor.name, was=was)
        return removed

    return _act(actor, "schedule-remove", queue, name, act)


@dataclass(frozen=True)
class Restored:
    queue: str
    name: str
    status: str  # restored, "would restore" (dry run), skipped
    paused: bool = False
    note: str = ""


def restore(actor: Actor, *, queue: str | None = None,
            dry_run: bool = False) -> list[Restored]:
    """Declare again, from their database rows, the schedules missing from Redis that no
    operator removed (Redis lost its data): each as it was last mirrored, paused if it was,
    from its next slot after now. One that exists in Redis is never touched. Each restore is
    audited (a dry run once per queue)."""
    if queue is not None:
        _queue_for_new(queue)  # a valid name, or BadInput
    rows = ScheduleRecord.objects.filter(removed_by="").order_by("queue", "name")
    if queue is not None:
        rows = rows.filter(queue=queue)
    by_queue: dict[str, list[ScheduleRecord]] = {}
    for row in rows:
        by_queue.setdefault(row.queue, []).append(row)
    out: list[Restored] = []
    for qname, candidates in by_queue.items():
        st = Schedules(_queue_for_new(qname))
        present = set(st.names())
        missing = [r for r in candidates if r.name not in present]
        if not missing:
            continue
        if dry_run:
            target = "dry run: schedules " + ", ".join(r.name for r in missing)
            check_permission(actor, "schedule-restore", qname, target, len(missing))
            audit.record(actor, "schedule-restore", qname, target=target[:2000],
                         count=len(missing))
            out += [Restored(qname, r.name, "would restore", r.paused) for r in missing]
            continue
        for row in missing:
            out.append(_restore_one(actor, st, row))
    return out


def _restore_one(actor: Actor, st: Schedules, row: ScheduleRecord) -> Restored:
    try:
        schedule = Schedule(**{**row.definition, "queue": row.queue, "name": row.name})
    except TypeError as exc:  # a definition this version cannot read
        schedule = None
        unreadable = str(exc)

    def act() -> Change:
        if schedule is None:
            raise InvalidSchedule(f"its stored definition cannot be read ({unreadable})")
        change = st.upsert(schedule, mode="create")
        if row.paused:
            st.pause(row.name, by=row.paused_by or actor.name)
        return change

    try:
        _act(actor, "schedule-restore", row.queue, row.name, act,
             lambda c: c.status == "created")
    except BadInput as exc:  # declared meanwhile, or no longer valid: the others go on
        return Restored(row.queue, row.name, "skipped", row.paused, str(exc))
    return Restored(row.queue, row.name, "restored", row.paused)


def pause(actor: Actor, queue: str, name: str) -> bool:
    return _act(actor, "schedule-pause", queue, name,
                lambda: store(queue).pause(name, by=actor.name))


def resume(actor: Actor, queue: str, name: str) -> bool:
    return _act(actor, "schedule-resume", queue, name, lambda: store(queue).resume(name))


def run_now(actor: Actor, queue: str, name: str) -> str:
    """Submit one run now; returns its request id."""
    return _act(actor, "schedule-run-now", queue, name,
                lambda: store(queue).run_now(name, by=actor.name))

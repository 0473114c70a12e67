"""Operator actions on recurring schedules, for the console and `manage.py schedule`: each
checks its permission (operators run now, pause and resume; admins create, edit, delete and
restore), acts through core.queue.schedule's store, and writes one audit entry (a refusal too).
A data job schedule is saved only if its next run passes the checks of `datajob submit`
(core.pipeline.submission), which each run passes again before it is queued."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from core.mirror.schedules import mark_removed
from core.models import ScheduleRecord
from core.pipeline.spec import SpecError
from core.queue import InvalidInput, QueueError, RedisUnavailable, StateChanged
from core.queue.keys import validate_id
from core.queue.schedule.spec import InvalidSchedule, Schedule, is_templated
from core.queue.schedule.store import Change, Schedules, UnknownSchedule

from . import audit
from .actions import check_permission, open_queue
from .audit import Actor
from .datajobs import submit_slot
from .errors import BadInput, NotFound, StaleState

T = TypeVar("T")


def store(queue: str) -> Schedules:
    """The schedules of `queue` (BadInput for a queue nobody has used); a data job's run now
    is submitted as the scheduler submits its slots."""
    return Schedules(open_queue(queue), submit_job=submit_slot)


def require(actor: Actor, action: str, queue: str, name: str) -> None:
    """Refused, and the refusal audited, unless `actor` may do `action` (schedule-add, ...):
    for a front end that refuses before it reads what was sent (an account with no role
    learns nothing from a form's checks)."""
    check_permission(actor, action, str(queue)[:128], f"schedule {str(name)[:128]}", 1)


def _act(actor: Actor, action: str, queue: str, name: str, fn: Callable[[], T],
         acted: Callable[[T], bool] = bool) -> T:
    target = f"schedule {name}"
    check_permission(actor, action, queue, target, 1)
    try:
        result = fn()
    except UnknownSchedule as exc:
        audit.record(actor, action, queue, target=target, count=1, error=str(exc)[:500])
        raise NotFound(str(exc)) from None
    except (InvalidInput, SpecError) as exc:
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
                lambda: st.upsert(checked(schedule, st.now_ms()), mode=mode,
                                  expect_version=expect_version),
                lambda c: c.status != "unchanged")


def checked(schedule: Schedule, now_ms: int) -> Schedule:
    """The schedule as it is saved: a data job's, after the checks of `datajob submit` on the
    job of its next slot (paths under the data roots and as Spark reads them, the SQL, its
    columns, the output), its local paths made absolute; SpecError saying what to change. Its
    runs are checked again, each before it is queued (datajobs.submit_slot)."""
    if schedule.job is None:
        return schedule
    from core.pipeline import submission

    s = replace(schedule, job=submission.absolute_paths(schedule.job))
    job = s.job or {}
    if not is_templated(job.get("output")) and job.get("overwrite") is not True \
            and job.get("mode") != "append":
        raise SpecError(
            f"the data job's output {job.get('output')!r} is the same for every run: the "
            "first run completes it and each later one would be refused; template it with the "
            "run's slot (such as var/out/delays/{date}; {datetime} or {slot} for more than one "
            'run a day), set "overwrite": true to replace it each time, or "mode": "append" '
            "to add each slot's rows to it")
    slot = s.after(now_ms) or now_ms
    submission.scheduled_job(s.job_fields(slot, s.request_id(slot)),
                             input_may_be_missing=is_templated(job.get("input")))
    submission.scheduled_options(s.options)
    return s


def _queue_for_new(queue: str) -> Any:
    """A new schedule may name a queue nobody has used yet (its workers start later)."""
    from core.conf import get_queue

    try:
        validate_id(queue, "queue name")
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None
    return get_queue(queue)


def remove(actor: Actor, queue: str, name: str) -> bool:
    """Delete the schedule; its database row (the mirror's) keeps it, marked removed by the
    actor, so that `schedule restore` does not bring it back."""
    def act() -> bool:
        validate_id(name, "schedule name")  # InvalidInput: BadInput, audited
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

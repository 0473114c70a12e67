"""Direct operator actions on up to 1,000 targets (a page's selection, an admin action, a
command line). Each checks the permission first (a refusal is audited, then raises Refused),
validates its input (BadInput), acts through the engine, which checks every target's state in
Lua (a target no longer as the page showed it is skipped, never acted on twice), and writes one
audit entry with what it did, also when Redis fails halfway (RedisUnavailable is raised then;
the entry says what was done before)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from core.conf import DEFAULT_QUEUE, get_queue, redis_client
from core.pipeline import jobs
from core.queue import (
    HandlerNotRun,
    InvalidInput,
    Queue,
    QueueError,
    RequestCancelled,
    StateChanged,
    UnknownRequest,
    UnknownWorker,
    read,
)
from core.queue.keys import validate_id, validate_task_id
from core.queue.schedule.store import Schedules

from . import audit
from .audit import Actor, as_actor, describe_ids
from .errors import BadInput, NotFound, Refused, StaleState
from .perms import permission_for

__all__ = ["Actor", "PauseImpact", "PendingRef", "Result", "cancel", "claim", "delete_dead",
           "pause", "pause_impact", "reclaim_worker", "release", "requeue_dead",
           "requeue_request", "resume", "run_now"]

CHUNK = 1000  # targets per call into Redis, and the most a direct action takes
# How long a direct cancel (console, `manage.py cancel`) waits for a data job's running tasks
# to stop before removing its staging data: none. A running chunk stops at its next lease
# renewal, seconds later, and its worker then removes the staging (jobs.clean_when_stopped);
# a web request is not held meanwhile.
JOB_WAIT_S = 0.0
PAST = {"requeue": "requeued", "delete": "deleted", "cancel": "cancelled", "claim": "claimed",
        "release": "released", "reclaim": "released", "pause": "paused", "resume": "resumed",
        "run-now": "made due now"}


@dataclass(frozen=True)
class Result:
    action: str
    acted: int
    skipped: int
    message: str  # what the page shows: "requeued 3,214 of 3,214; 0 skipped"
    audit_id: int
    notes: tuple[str, ...] = ()  # what else came of it (a data job's staging removed, ...)


@dataclass(frozen=True)
class PendingRef:
    """A pending entry as the page showed it, so a stale page never acts on the wrong one."""

    request_id: str
    task_id: str
    consumer: str  # the holder the page showed
    idle_ms: int  # the idle time the page showed (the engine checks idle >= this)


@dataclass
class Tally:
    acted: int = 0
    skipped: int = 0
    notes: list[str] = field(default_factory=list)


def message(action: str, acted: int, skipped: int) -> str:
    return f"{PAST[action]} {acted:,} of {acted + skipped:,}; {skipped:,} skipped"


def check_permission(actor: Actor, action: str, queue: str, target: str, count: int) -> None:
    """Refused (audited) unless `actor` may do `action`."""
    if not audit.may(actor, permission_for(action)):
        audit.record(actor, action, queue, target=target, count=count, refused=True,
                     error=f"{actor.name} lacks the permission {permission_for(action)}")
        raise Refused(f"{actor.name} may not {action}: it needs the permission "
                      f"{permission_for(action)} (the refusal was recorded)")


def open_queue(name: str) -> Queue:
    """The queue `name` if a producer or worker has used it (or it is the default queue)."""
    try:
        validate_id(name, "queue name")
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None
    if name != DEFAULT_QUEUE:
        names = read.queues(redis_client(), prefix=settings.QUEUE_PREFIX)
        if name not in names:
            raise NotFound(f"there is no queue named {name!r}")
    return get_queue(name)


def _ids(values: Sequence[str], what: str, check: Callable[[str], str]) -> list[str]:
    if isinstance(values, str):
        values = [values]
    ids = list(dict.fromkeys(v.strip() if isinstance(v, str) else v for v in values))
    if not ids:
        raise BadInput(f"no {what} given")
    if len(ids) > CHUNK:
        raise BadInput(f"{len(ids):,} {what}s given: at most {CHUNK:,} at once; use a bulk "
                       "action (preview, confirm) for more")
    try:
        return [check(i) for i in ids]
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None


def _request_id(value: str) -> str:
    return validate_id(value, "request id")


def run(
    who: Any,
    action: str,
    queue: str,
    target: str,
    count: int,
    validate: Callable[[], Any],
    act: Callable[[Queue, Any, Tally], None],
) -> Result:
    """The frame every action shares: permission, input, the engine, one audit entry."""
    actor = as_actor(who)
    check_permission(actor, action, queue, target, count)
    q = open_queue(queue)
    args = validate()
    tally = Tally()
    try:
        act(q, args, tally)
    except StaleState as exc:
        audit.record(actor, action, queue, target=target, count=count, acted=tally.acted,
                     skipped=tally.skipped, error=str(exc))
        raise
    except QueueError as exc:  # Redis unreachable or refusing: what was done is recorded
        audit.record(actor, action, queue, target=target, count=count, acted=tally.acted,
                     skipped=tally.skipped, error=str(exc))
        raise
    entry = audit.record(actor, action, queue, target=target, count=count, acted=tally.acted,
                         skipped=tally.skipped)
    return Result(action, tally.acted, tally.skipped,
                  message(action, tally.acted, tally.skipped), entry.id, tuple(tally.notes))


def _dead_action(who: Any, action: str, queue: str, dead_ids: Sequence[str],
                 op: Callable[[Queue, list[str]], tuple[int, int]]) -> Result:
    ids_in = list(dead_ids) if not isinstance(dead_ids, str) else [dead_ids]

    def act(q: Queue, ids: list[str], tally: Tally) -> None:
        acted, skipped = op(q, ids)  # one call into Redis: at most CHUNK ids
        tally.acted, tally.skipped = acted, skipped

    return run(who, action, queue, describe_ids([str(i) for i in ids_in]), len(ids_in),
               lambda: _ids(ids_in, "dead letter id", validate_task_id), act)


def requeue_dead(actor: Any, queue: str, dead_ids: list[str]) -> Result:
    """Dead letters back to waiting with their attempts reset; letters no longer dead are
    skipped. A failed request reopens."""
    return _dead_action(actor, "requeue", queue, dead_ids, lambda q, ids: q.requeue(ids))


def delete_dead(actor: Any, queue: str, dead_ids: list[str]) -> Result:
    """Dead letters removed for good, counted in their requests as discarded."""
    return _dead_action(actor, "delete", queue, dead_ids, lambda q, ids: q.delete_dead(ids))


def requeue_request(actor: Any, queue: str, request_id: str) -> Result:
    """Every dead letter of one request back to waiting."""

    def act(q: Queue, rid: str, tally: Tally) -> None:
        try:
            tally.acted = q.requeue_request(rid)
        except UnknownRequest:
            raise NotFound(f"there is no request {rid!r} in queue {queue!r}") from None
        except RequestCancelled:
            raise StaleState(f"request {rid!r} was cancelled: its dead letters stay") from None

    return run(actor, "requeue", queue, f"all dead letters of request {request_id}", 1,
               lambda: _ids([request_id], "request id", _request_id)[0], act)


def cancel(actor: Any, queue: str, request_ids: list[str], *,
           job_wait_s: float = JOB_WAIT_S) -> Result:
    """Requests deliver no more tasks; running ones are told to stop. A request already
    finished, cancelled or gone is skipped. A data job's request cancels the whole job and
    removes its staging data (core.pipeline.jobs.cancel, waiting up to `job_wait_s` for its
    running tasks to stop)."""
    ids_in = list(request_ids) if not isinstance(request_ids, str) else [request_ids]
    return run(actor, "cancel", queue, describe_ids([str(i) for i in ids_in]), len(ids_in),
               lambda: _ids(ids_in, "request id", _request_id),
               lambda q, rids, tally: cancel_each(q, rids, tally, job_wait_s=job_wait_s))


def run_now(actor: Any, queue: str, request_ids: list[str]) -> Result:
    """Delayed (scheduled) requests are due now: their tasks become eligible at once, under
    the usual priorities. One no longer scheduled (due already, cancelled, gone) is skipped."""
    ids_in = list(request_ids) if not isinstance(request_ids, str) else [request_ids]

    def act(q: Queue, rids: list[str], tally: Tally) -> None:
        for rid in rids:
            try:
                _, changed = q.run_now(rid)
            except UnknownRequest:
                changed = False
            if changed:
                tally.acted += 1
            else:
                tally.skipped += 1

    return run(actor, "run-now", queue, describe_ids([str(i) for i in ids_in]), len(ids_in),
               lambda: _ids(ids_in, "request id", _request_id), act)


def cancel_each(q: Queue, rids: list[str], tally: Tally, *, job_wait_s: float = 0.0) -> None:
    """Cancel each request (one call into Redis each), counting as it goes; then the data jobs
    among them as a whole (both requests, staging data: see core.pipeline.jobs.cancel), with
    one deadline of `job_wait_s` for all (0, for bulk runs: a job still running keeps its
    staging for `datajob clean`)."""
    data_jobs: list[str] = []
    for rid in rids:
        job = jobs.job_of(q, rid)
        if job is not None:
            data_jobs.append(job)
        try:
            outcome = q.cancel(rid)
        except UnknownRequest:
            tally.skipped += 1
            continue
        if outcome.changed:
            tally.acted += 1
        else:
            tally.skipped += 1
    if data_jobs:
        for done in jobs.cancel(q, data_jobs, wait_s=job_wait_s):
            tally.notes.append(done.describe())


MAX_IDLE_MS = 2**53  # what Redis takes as a time in ms (and JSON as a whole number)


def _refs(entries: Sequence[PendingRef]) -> list[PendingRef]:
    refs = list(entries)
    if not refs:
        raise BadInput("no pending entry given")
    if len(refs) > CHUNK:
        raise BadInput(f"at most {CHUNK:,} pending entries at once")
    try:
        for r in refs:
            validate_id(r.request_id, "request id")
            validate_task_id(r.task_id)
            validate_id(r.consumer, "consumer name")
            if (isinstance(r.idle_ms, bool) or not isinstance(r.idle_ms, int)
                    or not 0 <= r.idle_ms <= MAX_IDLE_MS):
                raise InvalidInput(f"invalid idle time {r.idle_ms!r}: 0 to {MAX_IDLE_MS:,} ms")
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None
    return refs


def _describe_refs(entries: Sequence[PendingRef]) -> str:
    return describe_ids([f"{e.request_id}/{e.task_id}@{e.consumer}" for e in entries])


def claim(actor: Any, queue: str, entries: list[PendingRef], to_consumer: str) -> Result:
    """Move leased tasks to another live consumer, once the runs they are taken from have
    stopped (or their leases expired: Queue.claim); an entry no longer held by the consumer
    shown, or delivered again since (idle less than shown), is skipped."""

    def validate() -> list[PendingRef]:
        refs = _refs(entries)
        try:
            validate_id(to_consumer, "consumer name")
        except InvalidInput as exc:
            raise BadInput(str(exc)) from None
        return refs

    def act(q: Queue, refs: list[PendingRef], tally: Tally) -> None:
        if not _alive(q, to_consumer):
            raise BadInput(f"{to_consumer!r} is not a live worker of queue {queue!r}")
        for r in refs:
            try:
                q.claim(r.request_id, r.task_id, to_consumer, expect_consumer=r.consumer,
                        min_idle_ms=r.idle_ms)
                tally.acted += 1
            except (StateChanged, UnknownRequest):
                tally.skipped += 1
            except HandlerNotRun:
                tally.skipped += 1
                note = (f"{to_consumer} does not run the handler of some of them: they "
                        "stay with their holder")
                if note not in tally.notes:
                    tally.notes.append(note)

    target = f"{_describe_refs(entries)} to {to_consumer}"
    return run(actor, "claim", queue, target, len(entries), validate, act)


def _alive(q: Queue, worker: str) -> bool:
    """Whether `worker` beat within its --dead-after (15 s if its entry does not say)."""
    beat, info = read.heartbeat(q, worker)
    if beat is None:
        return False
    try:
        dead_after = int(json.loads(info or "{}").get("dead_after_ms") or 15_000)
    except (ValueError, TypeError, AttributeError):
        dead_after = 15_000
    return bool(q.now_ms() - int(beat) < dead_after)


def release(actor: Any, queue: str, entries: list[PendingRef]) -> Result:
    """Leased tasks back to waiting without spending an attempt, once the runs they are taken
    from have stopped (or their leases expired: Queue.release_task); skipped as claim()."""

    def act(q: Queue, refs: list[PendingRef], tally: Tally) -> None:
        for r in refs:
            try:
                q.release_task(r.request_id, r.task_id, expect_consumer=r.consumer,
                               min_idle_ms=r.idle_ms)
                tally.acted += 1
            except (StateChanged, UnknownRequest):
                tally.skipped += 1

    return run(actor, "release", queue, _describe_refs(entries), len(entries),
               lambda: _refs(entries), act)


def reclaim_worker(actor: Any, queue: str, worker: str) -> Result:
    """Every lease of a worker past its --dead-after back to waiting (no attempt spent), and
    the worker out of the registry. StaleState if it beat within it, or is gone already."""

    def validate() -> str:
        try:
            return validate_id(worker, "worker name")
        except InvalidInput as exc:
            raise BadInput(str(exc)) from None

    def act(q: Queue, name: str, tally: Tally) -> None:
        try:
            released, cancelled = q.reclaim_worker(name)
        except StateChanged:
            raise StaleState(_why_alive(q, name)) from None
        except UnknownWorker:
            raise StaleState(f"worker {name!r} is not registered (reclaimed already, or "
                             "gone for over an hour)") from None
        tally.acted = released + cancelled

    return run(actor, "reclaim", queue, f"worker {worker}", 1, validate, act)


def _why_alive(q: Queue, worker: str) -> str:
    _, info = read.heartbeat(q, worker)
    try:
        known = bool(json.loads(info or "{}").get("dead_after_ms"))
    except (ValueError, TypeError, AttributeError):
        known = False
    if not known:
        return (f"worker {worker!r} did not register its --dead-after (an older version?): "
                "nothing was reclaimed; the reaper takes its leases once they expire")
    return (f"worker {worker!r} beat within its --dead-after: it may still be running its "
            "tasks; nothing was reclaimed")


@dataclass(frozen=True)
class PauseImpact:
    """What pausing a queue stops, and what goes on, as its confirmation says it."""

    queue: str
    paused: bool  # already
    waiting: int  # tasks that stay waiting
    running: int  # leased tasks: they finish
    retries: int  # tasks in retry backoff: they come due into the paused queue and wait
    delayed: int  # delayed requests (submitted with a due time): likewise
    workers: int  # live workers of the queue
    schedules: tuple[tuple[str, int | None], ...]  # active schedules: name, next slot (ms)


def pause_impact(queue: str) -> PauseImpact:
    """What a pause of `queue` would stop now (a read; nothing is audited, nothing changes)."""
    q = open_queue(queue)
    st = read.stats(q)
    heads = Schedules(q).heads()
    active = tuple((h.name, h.next_ms) for h in heads.values() if h.status == "active")
    return PauseImpact(queue=queue, paused=st.paused, waiting=st.waiting, running=st.leased,
                       retries=st.delayed, delayed=st.scheduled, workers=st.workers,
                       schedules=active)


def pause(actor: Any, queue: str) -> Result:
    """Workers lease nothing from the queue until it is resumed; running tasks finish."""
    return _switch(actor, queue, "pause")


def resume(actor: Any, queue: str) -> Result:
    """A paused queue hands out work again."""
    return _switch(actor, queue, "resume")


def _switch(who: Any, queue: str, action: str) -> Result:
    actor = as_actor(who)

    def act(q: Queue, _: None, tally: Tally) -> None:
        changed = q.pause(actor.name) if action == "pause" else q.resume(actor.name)
        tally.acted, tally.skipped = (1, 0) if changed else (0, 1)

    result = run(actor, action, queue, f"queue {queue}", 1, lambda: None, act)
    text = (f"queue {queue} {PAST[action]}" if result.acted
            else f"queue {queue} was already {'paused' if action == 'pause' else 'running'}")
    return Result(result.action, result.acted, result.skipped, text, result.audit_id)

"""The bulk actions' runner (`manage.py runactions`): works through every running bulk action's
snapshot, at most 1,000 ids per call into Redis, honouring its rate and a stop between
chunks. Progress (position, acted, skipped) is saved after every chunk, on the action and on
its audit entry alike, so a stop, a crash or a Redis outage leaves counts that add up: what
was handled is position = acted + skipped, of count.

One runner per database (as one mirror per group): `make run` starts one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import close_old_connections
from django.utils import timezone

from core.models import AuditEntry, BulkAction
from core.queue import Queue, QueueError, RedisUnavailable

from .actions import CHUNK, Tally, cancel_each, open_queue

log = logging.getLogger("queueadmin.actions")
BACKOFF_MAX_S = 10.0


@dataclass
class RunnerState:
    next_at: dict[int, float] = field(default_factory=dict)  # bulk id -> its next chunk's time
    backoff: float = 0.0


def _act(q: Queue, action: str, ids: list[str], tally: Tally) -> None:
    if action == "requeue":
        tally.acted, tally.skipped = q.requeue(ids)
    elif action == "delete":
        tally.acted, tally.skipped = q.delete_dead(ids)
    else:
        cancel_each(q, ids, tally)


def _save(b: BulkAction, position: int, tally: Tally, **extra: object) -> None:
    b.position = position
    b.acted += tally.acted
    b.skipped += tally.skipped
    BulkAction.objects.filter(pk=b.pk).update(position=b.position, acted=b.acted,
                                              skipped=b.skipped, **extra)
    # The run's own entry (written at confirm), not a stop's, which has an action of its own.
    AuditEntry.objects.filter(bulk=b, action=b.action).update(
        acted=b.acted, skipped=b.skipped,
        **({"error": extra["error"]} if "error" in extra else {}))


def _finish(b: BulkAction, status: str, error: str = "") -> None:
    b.status = status
    BulkAction.objects.filter(pk=b.pk).update(status=status, finished_at=timezone.now(),
                                              error=error)
    if error:
        AuditEntry.objects.filter(bulk=b, action=b.action).update(error=error)
    log.info("bulk action #%d %s: %s; acted %d, skipped %d of %d", b.pk, status,
             b.description, b.acted, b.skipped, b.count)


def step(b: BulkAction, state: RunnerState, clock: Callable[[], float] = time.monotonic) -> bool:
    """One chunk of `b` if it is due; returns whether it did anything."""
    status = BulkAction.objects.filter(pk=b.pk).values_list("status", flat=True).first()
    if status == "stopping":
        _finish(b, "stopped")
        return True
    if status != "running":
        return False
    if b.position >= b.count:
        _finish(b, "done")
        return True
    if clock() < state.next_at.get(b.pk, 0.0):
        return False
    size = min(CHUNK, b.rate_per_s) if b.rate_per_s else CHUNK
    ids = list(b.target_ids[b.position : b.position + size])
    tally = Tally()
    started = clock()
    try:
        _act(open_queue(b.queue), b.action, ids, tally)
    except RedisUnavailable:
        # Cancel goes one request at a time: what it did before the outage is kept.
        _save(b, b.position + tally.acted + tally.skipped, tally)
        raise
    except QueueError as exc:
        _save(b, b.position + tally.acted + tally.skipped, tally)
        _finish(b, "failed", str(exc))
        return True
    except Exception as exc:  # a bad snapshot (queue gone): the action fails, others go on
        _save(b, b.position + tally.acted + tally.skipped, tally)
        _finish(b, "failed", f"{type(exc).__name__}: {exc}")
        log.exception("bulk action #%d failed", b.pk)
        return True
    _save(b, b.position + len(ids), tally)
    if b.rate_per_s:
        state.next_at[b.pk] = started + len(ids) / b.rate_per_s
    if b.position >= b.count:
        _finish(b, "done")
    return True


def run_once(state: RunnerState, loaded: dict[int, BulkAction]) -> bool:
    """One chunk of each running or stopping action that is due; whether any was done."""
    active = list(BulkAction.objects.filter(status__in=("running", "stopping"))
                  .order_by("id").values_list("id", flat=True))
    for gone in set(loaded) - set(active):
        del loaded[gone]
    did = False
    for pk in active:
        b = loaded.get(pk)
        if b is None:
            b = loaded[pk] = BulkAction.objects.get(pk=pk)  # the snapshot, read once
        did = step(b, state) or did
        if b.status in ("done", "stopped", "failed") or b.position >= b.count:
            loaded.pop(pk, None)
    return did


def run_actions(
    *, burst: bool = False, poll_s: float = 0.5, stop: threading.Event | None = None
) -> None:
    """Run bulk actions until stopped (`burst`: until none is running)."""
    stop = stop or threading.Event()
    state, loaded = RunnerState(), dict[int, BulkAction]()
    outage = False
    while not stop.is_set():
        try:
            did = run_once(state, loaded)
            if outage:
                log.info("bulk actions: Redis answers again")
                outage, state.backoff = False, 0.0
        except RedisUnavailable as exc:
            if not outage:
                log.warning("bulk actions: Redis unreachable, retrying (%s)", exc)
            outage = True
            state.backoff = min(BACKOFF_MAX_S, max(0.5, state.backoff * 2))
            loaded.clear()  # read again: the last chunk's progress was saved
            if burst:
                raise
            stop.wait(state.backoff)
            continue
        if burst and not BulkAction.objects.filter(status__in=("running", "stopping")).exists():
            return
        if not did:
            if not burst:
                close_old_connections()
            wait = poll_s
            if state.next_at:
                wait = min(wait, max(0.0, min(state.next_at.values()) - time.monotonic()))
            stop.wait(max(0.01, wait))

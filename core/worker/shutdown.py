"""A worker that stops gives back only what no handler runs: the start gate between the
slots and the main thread, the interrupt of running handlers once the grace is over, and the
release of the tasks no slot started (issue 33: never two runs of one task at once)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import TYPE_CHECKING

from core.queue import Queue, RedisUnavailable

from .config import GIVE_BACK_S, STOP_WAIT_S
from .context import TaskContext

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from .acks import PendingAcks
    from .held import Batch, Held

log = logging.getLogger("queueadmin.worker")


def _taken_back(ctxs: list[TaskContext]) -> list[TaskContext]:
    """Mark the tasks of `ctxs` that no slot has started (nor given back) as given back, and
    return them; called under the worker's start lock, so that _begin then refuses them."""
    unstarted = [c for c in ctxs if not c.started and not c.given_back]
    for ctx in unstarted:
        ctx.given_back = True
    return unstarted


class Shutdown:
    """The part of Worker (a mixin) that decides which leased tasks a worker gives back
    unstarted: all of them when it stops or is quieted, those behind a slow task otherwise."""

    queues: list[Queue]
    name: str
    held: Held
    stopping: threading.Event
    quiet: threading.Event
    _start_lock: threading.Lock
    _count_lock: threading.Lock
    _busy: int
    _acks: list[PendingAcks]
    _batches: set[Batch]  # the batches the slots are running (under _start_lock)

    if TYPE_CHECKING:
        def _finish(self, q: Queue, ctxs: list[TaskContext],
                    op: Callable[[list[str]], Any]) -> None: ...
        def _settle(self, q: Queue, acked: list[str], accepted: list[bool]) -> None: ...

    def _interrupt(self) -> None:
        """Tell every running handler to stop (ctx.check() raises Interrupted) and wait up to
        STOP_WAIT_S for the slots to finish with them: each gives its task back itself, once
        its handler has returned. No task starts after this (stopping is set: see _begin)."""
        with self._start_lock:
            running = [c for ctxs in self.held.snapshot().values() for c in ctxs
                       if c.started and not c.finished]
            for ctx in running:
                ctx.interrupted = True
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            with self._count_lock:
                if not self._busy:
                    return
            time.sleep(0.01)

    def _begin(self, ctx: TaskContext, batch: Batch, at: int) -> bool:
        """Start `ctx`, task `at` of `batch`, unless the worker is stopping or quiet, or it was
        given back."""
        with self._start_lock:
            if self.stopping.is_set() or self.quiet.is_set() or ctx.given_back:
                return False
            ctx.started = True
            batch.at, batch.since = at, time.monotonic()
            return True

    def _give_back_behind_slow(self) -> None:
        """Give back, unstarted, the tasks a slot leased behind one that has run GIVE_BACK_S,
        so that idle slots and workers run them now rather than after it: a batch grows while
        its tasks are quick, and the next task may not be. Not attempts; the release hands
        them straight to idle workers."""
        now = time.monotonic()
        behind: list[tuple[Batch, list[TaskContext]]] = []
        with self._start_lock:
            for batch in self._batches:
                if batch.since and now - batch.since >= GIVE_BACK_S:
                    tail = _taken_back(batch.ctxs[batch.at + 1:])
                    if tail:
                        behind.append((batch, tail))
        for batch, tail in behind:
            slow = batch.ctxs[batch.at]
            log.debug("gave back %d tasks leased behind a slow one queue=%s request=%s task=%s "
                      "worker=%s", len(tail), batch.queue.name, slow.request_id, slow.task_id,
                      self.name)
            self._finish(batch.queue, tail, batch.queue.release)

    def _give_back(self, q: Queue, ctxs: list[TaskContext]) -> None:
        """Release the tasks of `ctxs` that no slot has started (or will): not attempts."""
        with self._start_lock:
            unstarted = _taken_back(ctxs)
        if unstarted:
            self._finish(q, unstarted, q.release)

    def _release_all(self) -> None:
        """On a hard stop: send the acks of finished tasks, and give back the tasks leased but
        not started. A task whose handler still runs keeps its lease (see STOP_WAIT_S)."""
        for q in self.queues:
            taken = [pending.take(q.name) for pending in self._acks]
            finished = [t for a in taken for t in a.tokens]
            if finished:
                # If Redis is down, their leases expire and they run again: at-least-once.
                with contextlib.suppress(RedisUnavailable):
                    accepted = q.ack_many(finished,
                                           durations=[d for a in taken for d in a.durations])
                    self._settle(q, finished, accepted)
            with self._start_lock:
                unstarted = _taken_back(self.held.snapshot().get(q.name, []))
            if not unstarted:
                continue
            tokens = [c.lease.lease for c in unstarted]
            try:
                results = q.release(tokens)
            except RedisUnavailable as exc:
                log.error("could not release %d tasks queue=%s worker=%s (%s): they return to "
                          "waiting when their leases expire", len(tokens), q.name, self.name, exc)
                continue
            self.held.discard(q.name, tokens)
            log.info("released %d tasks not started queue=%s worker=%s", results.count(1),
                     q.name, self.name)

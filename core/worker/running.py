"""One task's run in a slot: its handler called, then acked, failed, given back or
dropped, as the way it ended says (and through a Redis outage, retried until a hard stop)."""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from core.queue import InvalidResult, LeaseLost, Queue
from core.queue.models import FailOutcome

from .config import PASSING, WorkerConfig
from .context import (
    Cancelled,
    Interrupted,
    LeaseGone,
    TaskContext,
    TimeLimitExceeded,
    Unavailable,
)

if TYPE_CHECKING:
    from core.tracing.runs import TaskSpans

    from .acks import PendingAcks
    from .heartbeat import Heartbeat
    from .held import Held
    from .outage import Outage
    from .registry import Registry

log = logging.getLogger("queueadmin.worker")
# What a handler raises to give its task back unfinished (no attempt spent): not a failure.
GIVEN_BACK = (Cancelled, Interrupted, Unavailable, LeaseGone)


class TaskRuns:
    """The part of Worker (a mixin) that runs one leased task and settles it."""

    name: str
    config: WorkerConfig
    registry: Registry
    heartbeat: Heartbeat
    held: Held
    outage: Outage
    hard_stop: threading.Event
    spans: TaskSpans | None

    if TYPE_CHECKING:
        def _done(self, *, failed: bool = False, ran: bool = True) -> None: ...
        def _wait_ready(self, handlers: list[str] | None = None, *,
                        starting: bool = False) -> None: ...

    def _run_one(self, q: Queue, ctx: TaskContext, acks: PendingAcks) -> None:
        lease = ctx.lease
        fn = self.registry.get(lease.handler)
        if fn is None:
            # Never leased so (dequeues name the handlers this worker runs); handed over by
            # another way (an operator's claim for this worker): back to waiting for a worker
            # that runs it, no attempt spent.
            log.warning("task given back: no handler %r in this worker (it runs %s) queue=%s "
                        "request=%s task=%s worker=%s", lease.handler,
                        ", ".join(self.registry.names()), q.name, ctx.request_id, ctx.task_id,
                        self.name)
            self._finish(q, [ctx], q.release)
            return
        limit = self.registry.time_limit(lease.handler) or self.config.time_limit
        if limit:
            ctx.deadline, ctx.time_limit = time.monotonic() + limit, limit
            self.heartbeat.beater.started(q.name, ctx, limit)
        # Its span while tracing is on (core.tracing.runs): current for the handler.
        spans = self.spans
        run = spans.start(q.name, lease) if spans is not None else None
        started = time.perf_counter()  # the run's time goes to the handler's metrics
        try:
            try:
                value = fn(lease.payload, ctx)
            finally:
                ctx.flush_progress()  # the last report, before the ack or fail ends the lease
        except Exception as exc:
            if spans is not None and run is not None:
                spans.finish(run, exc, failed=not isinstance(exc, GIVEN_BACK))
            self._raised(q, ctx, exc, time.perf_counter() - started, limit or 0.0)
        else:
            if spans is not None and run is not None:
                spans.finish(run)
            self._returned(q, ctx, acks, value, time.perf_counter() - started)

    def _raised(self, q: Queue, ctx: TaskContext, exc: Exception, ran: float,
                limit: float) -> None:
        """The handler raised `exc` after `ran` seconds: the task is given back, dropped or
        failed as the exception says. Called while the exception is handled (traceback)."""
        if isinstance(exc, Cancelled):
            log.info("task stopped: request cancelled queue=%s request=%s task=%s worker=%s",
                     q.name, ctx.request_id, ctx.task_id, self.name)
            self._finish(q, [ctx], q.release)
        elif isinstance(exc, Interrupted):
            self._interrupted(q, ctx)
        elif isinstance(exc, Unavailable):
            log.warning("task given back: %s queue=%s request=%s task=%s worker=%s", exc,
                        q.name, ctx.request_id, ctx.task_id, self.name)
            self._finish(q, [ctx], q.release)
            self._wait_ready([ctx.lease.handler])
        elif isinstance(exc, LeaseGone):
            log.warning("task stopped: lease lost queue=%s request=%s task=%s worker=%s",
                        q.name, ctx.request_id, ctx.task_id, self.name)
            self._stopped(q, ctx)
        elif isinstance(exc, TimeLimitExceeded):
            if ctx.timed_out:  # already failed by the heartbeat
                self.held.discard(q.name, [ctx.lease.lease])
                self._done(failed=True)
            else:
                self._fail(q, ctx, f"TimeLimitExceeded: {exc} ({limit:g}s)", "", retry=True,
                           duration=ran)
        elif ctx.interrupted:  # e.g. its Spark job, cancelled because the worker stops
            self._interrupted(q, ctx)
        else:
            # A failure the handler marks permanent (core.worker.Permanent) is not retried.
            self._fail(q, ctx, f"{type(exc).__name__}: {exc}", traceback.format_exc(),
                       retry=not getattr(exc, "permanent", False), duration=ran)

    def _returned(self, q: Queue, ctx: TaskContext, acks: PendingAcks, value: Any,
                  ran: float) -> None:
        """The handler returned `value` after `ran` seconds: its ack waits for the slot's
        next call (or the flusher)."""
        try:
            # Kept with the ack that finishes the task; checked now, so a result that
            # cannot be kept fails the task (for good: a rerun would return the same).
            ack = ctx.lease.lease if value is None else q.ack_entry(ctx.lease, value)
        except InvalidResult as exc:
            self._fail(q, ctx, f"{type(exc).__name__}: {exc}", "", retry=False, duration=ran)
            return
        ctx.finished = True
        acks.add(q.name, ack, ran, ctx.lease.handler)
        self._done()

    def _interrupted(self, q: Queue, ctx: TaskContext) -> None:
        """The handler returned after the stopping worker told it to: its task goes back to
        waiting now, not counted as an attempt."""
        log.info("task given back: worker stopping queue=%s request=%s task=%s worker=%s",
                 q.name, ctx.request_id, ctx.task_id, self.name)
        self._finish(q, [ctx], q.release)

    def _fail(self, q: Queue, ctx: TaskContext, error: str, tb: str, *, retry: bool,
              duration: float | None = None) -> None:
        try:
            out: FailOutcome | None = self._retrying(
                lambda: q.fail(ctx.lease, error, tb, worker=self.name, retry=retry,
                               duration=duration)
            )
        except LeaseLost:
            out = None
        except PASSING:
            return  # hard stop during an outage: the lease expires and the task runs again
        finally:
            self._done(failed=True)
        self.held.discard(q.name, [ctx.lease.lease])
        if out is None:
            log.warning("task failed but its lease was lost queue=%s request=%s task=%s "
                        "worker=%s: %s", q.name, ctx.request_id, ctx.task_id, self.name, error)
        else:
            log.warning("task failed queue=%s request=%s task=%s attempt=%d worker=%s -> %s%s: %s",
                        q.name, ctx.request_id, ctx.task_id, out.attempts, self.name, out.outcome,
                        f" in {out.delay_ms}ms" if out.outcome == "delayed" else "", error)

    def _finish(self, q: Queue, ctxs: list[TaskContext], op: Callable[[list[str]], Any]) -> None:
        """Give tasks back unrun (release): not counted as processed."""
        tokens = [c.lease.lease for c in ctxs]
        try:
            self._retrying(lambda: op(tokens))
        except PASSING:
            return  # hard stop during an outage: the leases expire and the tasks run again
        finally:
            for _ in ctxs:
                self._done(ran=False)
        self.held.discard(q.name, tokens)

    def _retrying(self, call: Callable[[], Any]) -> Any:
        """Retry a call through a Redis outage (until a hard stop); the scripts make a repeat
        harmless: a second fail or release of the same lease is refused."""
        while True:
            try:
                result = call()
            except PASSING as exc:
                if self.hard_stop.is_set():
                    raise
                time.sleep(self.outage.failed("finish", exc))
                continue
            self.outage.recovered("finish")
            return result

    def _stopped(self, q: Queue, ctx: TaskContext) -> None:
        """A run whose lease was taken away is over (or never started): say so. An operator's
        release or claim of a task keeps it from running elsewhere while the old run may go
        on; this lets it move on now rather than when the old lease would have expired."""
        self.held.discard(q.name, [ctx.lease.lease])
        self._done(ran=False)
        if not ctx.lost:
            return  # not known lost (Redis did not answer): the reaper's once it expires
        try:
            q.release([ctx.lease.lease])  # refused (-1): the lease is not ours; ends the wait
        except PASSING as exc:
            log.warning("could not tell Redis that the run stopped queue=%s request=%s task=%s "
                        "worker=%s (%s): the task moves on when the lease expires",
                        q.name, ctx.request_id, ctx.task_id, self.name, exc)

    def _still_held(self, q: Queue, ctx: TaskContext) -> bool:
        """Never start a run on a lease that may be gone (e.g. the worker was paused past it):
        confirmed with Redis unless known to be held."""
        if ctx.trusted():  # the usual case, without the retry loop around the check
            return True
        try:
            held = bool(self._retrying(ctx.confirm))
        except PASSING:
            held = False
        if not held:
            log.warning("lease lost before the task started queue=%s request=%s task=%s "
                        "worker=%s: not running it (it runs elsewhere)",
                        q.name, ctx.request_id, ctx.task_id, self.name)
            self._stopped(q, ctx)
        return held

"""The worker process: task slots that lease, run and finish tasks, and the shutdown rules.

Each slot is a thread running one loop: ack what it finished and lease the next batch in one
round trip, run the batch, repeat; block on the queues' wake list when there is nothing.
The batch adapts: it doubles while tasks are short, up to `prefetch`, BATCH_WORK_S of work
and BATCH_REQUESTS requests (config.next_batch), and falls back to one task when they are
slow, so no-op tasks go at one round trip per batch while longer tasks are not hoarded by one
worker and no call holds Redis long.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from typing import Any

from core import tracing
from core.queue import Lease, Queue, RedisUnavailable
from core.queue.client import wait_for_any
from core.queue.consume import runs_text
from core.queue.metrics import Tally
from core.queue.read import drained
from core.queue.results import lease_of

from .acks import PendingAcks
from .config import (
    ACK_FLUSH_S,
    PASSING,
    READY_POLL_S,
    STARTUP_GRACE_S,
    WorkerConfig,
    next_batch,
    tasks_per_request,
)
from .context import TaskContext
from .heartbeat import Heartbeat
from .held import Batch, Held
from .outage import Outage
from .registry import Registry, default_registry
from .running import TaskRuns
from .shutdown import Shutdown
from .stats import Usage

log = logging.getLogger("queueadmin.worker")


class Worker(TaskRuns, Shutdown):
    """Runs tasks from `queues` until stopped (signal, --burst drained, or --max-tasks)."""

    def __init__(
        self, queues: list[Queue], config: WorkerConfig | None = None,
        registry: Registry | None = None,
    ) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        self.queues = queues
        self.config = config or WorkerConfig()
        self.name = self.config.name
        self.registry = registry or default_registry
        # A slot leases only tasks whose handler this worker runs (decided in Redis).
        self._runs = runs_text(self.registry.names())
        self.held = Held()
        # Idle slots may be handed tasks directly by producers (one round trip less per task
        # for an idle worker). Off with --max-tasks, whose budget a handoff would bypass.
        self._handoff = self.config.max_tasks is None
        self.outage = Outage()
        self.spans = tracing.task_spans(self.name)  # None unless tracing is on (issue 38)
        self.stopping = threading.Event()  # take no new work; finish what runs
        self.hard_stop = threading.Event()  # grace over: running handlers stop at their check
        # An operator's quiet (console, `manage.py worker quiet`): take no new work, finish
        # what runs, until resumed. Slots wait on `_active`, which is set unless quiet.
        self.quiet = threading.Event()
        self._active = threading.Event()
        self._active.set()
        self.stopped_on_request = False  # an operator's stop: the supervisor leaves it stopped
        self.usage = Usage(self.config.slots)
        self.processed = 0
        self.failed = 0
        self._inflight = 0  # leased or reserved by a slot, not yet finished (for --max-tasks)
        self._count_lock = threading.Lock()
        # A leased task is started by its slot or given back unstarted by the main thread's
        # stop, whichever decides first under this lock (_begin, _give_back), never both.
        self._start_lock = threading.Lock()
        self._batches: set[Batch] = set()  # what each slot runs (under _start_lock)
        self._busy = 0  # slots inside _run_batch (under _count_lock)
        self.abandoned = 0  # handlers still running when run() returned (see STOP_WAIT_S)
        self._started = time.time()
        self._signals = 0
        self._grace_deadline: float | None = None
        self._waiting_for: str | None = None  # what a readiness check waits for, if anything
        self._ready_lock = threading.Lock()
        # Finished tasks whose ack rides on the slot's next call; the main thread sends them
        # itself on a hard stop, so finished work is not released and run again.
        self._acks = [PendingAcks([q.name for q in queues]) for _ in range(self.config.slots)]
        # The handlers' metrics of the accepted acks, sent about once a second per queue.
        self._tallies = {q.name: Tally() for q in queues}
        self._flusher = threading.Thread(target=self._flush_loop, name="ack-flusher", daemon=True)
        self._flusher_done = threading.Event()
        self.heartbeat = Heartbeat(
            worker=self.name, queues=queues, held=self.held, lease_ms=self.config.lease_ms,
            interval=self.config.dead_after / 5, reap_interval=1.0, info=self._info,
            outage=self.outage, control=self.control,
            # A queue on a test's injected clock cannot be renewed from another process.
            process=self.config.heartbeat == "process"
            and not any(q.has_injected_clock for q in queues),
        )

    # -- lifecycle ----------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped; returns the exit code (0). In the main thread it handles SIGTERM
        and SIGINT until it returns (then the previous handlers are back)."""
        previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                previous[sig] = signal.signal(sig, self._on_signal)
        try:
            return self._run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _run(self) -> int:
        log.info("worker started worker=%s queues=%s slots=%d pid=%d dead_after=%.1fs handlers=%s",
                 self.name, ",".join(q.name for q in self.queues), self.config.slots,
                 os.getpid(), self.config.dead_after, ",".join(self.registry.names()))
        for q in self.queues:  # a quiet or stop was for an earlier process of this name
            with contextlib.suppress(*PASSING):
                q.forget_control(self.name)
        self.heartbeat.start()
        # Before any lease: a worker that cannot run a task yet (its Spark not up) takes none,
        # so no task waits on it while another worker could run it.
        self._wait_ready(starting=True)
        self._flusher.start()
        slots = [
            threading.Thread(target=self._slot, args=(i,), name=f"slot-{i}", daemon=True)
            for i in range(self.config.slots)
        ]
        for t in slots:
            t.start()
        while any(t.is_alive() for t in slots):
            if self.hard_stop.is_set():
                break
            if self._grace_deadline is not None and time.monotonic() > self._grace_deadline:
                log.warning("grace period over worker=%s: telling running tasks to stop",
                            self.name)
                self.hard_stop.set()
                break
            for t in slots:
                t.join(0.1)
        if self.hard_stop.is_set():
            self._interrupt()
        self._flusher_done.set()
        self._flusher.join(5)
        self._leave_idle()
        if self.hard_stop.is_set():
            self._release_all()
        self._send_tallies(force=True)
        with self._count_lock:
            self.abandoned = self._busy
        # From here no lease of this process is renewed: an abandoned handler's expires.
        self.heartbeat.stop()
        self._unregister()
        if self.abandoned:
            log.warning("worker stopped worker=%s with %d handlers still running (they ignore "
                        "ctx.check()): they end with this process; their tasks run again once "
                        "their leases expire (%.1fs) or are reclaimed", self.name,
                        self.abandoned, self.config.dead_after)
        if self.spans is not None:
            tracing.flush()  # the runs' spans exported before the process may end
        log.info("worker stopped worker=%s processed=%d failed=%d", self.name, self.processed,
                 self.failed)
        return 0

    def stop(self, *, hard: bool = False) -> None:
        """Stop taking work; with hard=True, also tell running handlers to stop now (at their
        next ctx.check(); their tasks go back once they have returned)."""
        if not self.stopping.is_set():
            self.stopping.set()
            self._grace_deadline = time.monotonic() + self.config.grace
        self._active.set()  # quiet slots wake up to see it and return
        if hard:
            self.hard_stop.set()

    def control(self, wanted: str) -> None:
        """What an operator asked of this worker, as its heartbeat read it from Redis:
        "quiet" (take no new task, finish the running ones), "stop" (the same, then exit 0,
        as on SIGTERM: running tasks get the grace time) or "" (take work again)."""
        if self.stopping.is_set():
            return
        if wanted == "stop":
            log.info("stop requested by an operator worker=%s: finishing running tasks (up "
                     "to %.0fs), then exiting", self.name, self.config.grace)
            self.stopped_on_request = True
            self.stop()
        elif wanted == "quiet" and not self.quiet.is_set():
            log.info("quiet requested by an operator worker=%s: takes no new task; running "
                     "ones finish", self.name)
            self.quiet.set()
            self._active.clear()
        elif wanted == "" and self.quiet.is_set():
            log.info("resumed by an operator worker=%s: takes tasks again", self.name)
            self.quiet.clear()
            self._active.set()

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            log.info("%s: stopping worker=%s (finishing running tasks, up to %.0fs; "
                     "send again to stop them now)", name, self.name, self.config.grace)
            self.stop()
        else:
            log.info("%s again: telling running tasks to stop now worker=%s", name, self.name)
            self.stop(hard=True)

    def _unregister(self) -> None:
        for q in self.queues:
            with contextlib.suppress(RedisUnavailable):  # the entry expires by itself
                q.unregister(self.name, stopped=self.stopped_on_request)

    def _info(self) -> dict[str, Any]:
        return {
            "host": os.uname().nodename, "pid": os.getpid(), "slots": self.config.slots,
            "queues": [q.name for q in self.queues], "started": int(self._started),
            "processed": self.processed, "failed": self.failed, "running": self.held.count(),
            "stopping": self.stopping.is_set(), "quiet": self.quiet.is_set(),
            **({"waiting": self._waiting_for} if self._waiting_for else {}),
            **self.usage.sample(),
        }

    def _wait_ready(self, handlers: list[str] | None = None, *, starting: bool = False) -> None:
        """Block until the handlers' readiness checks pass (or the worker stops), saying once
        what it waits for. One slot asks at a time; the others wait behind it."""
        with self._ready_lock:
            said = None
            warned = False
            since = time.monotonic()
            while not self.stopping.is_set():
                reason = self.registry.not_ready(handlers, starting=starting)
                self._waiting_for = reason
                if reason is None:
                    if said is not None:
                        log.info("ready worker=%s: takes tasks; no longer true after %.1f s: "
                                 "%s", self.name, time.monotonic() - since, said)
                    return
                waited = time.monotonic() - since
                if reason != said:
                    # At start, waiting for a service that starts beside it (the stack's
                    # Spark) is expected: a warning only once it lasts.
                    level = logging.INFO if starting and waited < STARTUP_GRACE_S \
                        else logging.WARNING
                    log.log(level, "waiting worker=%s: takes no task while %s", self.name,
                            reason)
                    said, warned = reason, level == logging.WARNING
                elif not warned and waited >= STARTUP_GRACE_S:
                    log.warning("waiting worker=%s: still takes no task after %.0f s while %s",
                                self.name, waited, reason)
                    warned = True
                self.stopping.wait(READY_POLL_S)

    # -- the slot loop ------------------------------------------------------------------

    def _slot(self, slot: int) -> None:
        acks = self._acks[slot]
        batch = 1
        quiet_seen = False
        while not self.hard_stop.is_set():
            want = 0 if self.stopping.is_set() or self.quiet.is_set() else self._reserve(batch)
            asked = self._ask(slot, acks, want)
            if asked is None:
                continue  # Redis error: retry after the backoff
            queue, got, sent, next_due = asked
            if queue is None:
                self._unreserve(want)
                if self.stopping.is_set():
                    return
                if self.quiet.is_set():
                    if not quiet_seen:  # offered no more handoffs; any handed over go back
                        quiet_seen = True
                        self._leave_idle()
                    self._active.wait(self.config.idle_wait)
                    continue
                quiet_seen = False
                if self.config.burst and self._drained():
                    log.info("burst: queues drained, slot %d done worker=%s", slot, self.name)
                    return
                sent = time.monotonic()
                handed = self._idle(next_due)
                if handed is None:
                    continue
                queue, got = handed
                self._unreserve(-len(got))  # in flight like any leased task
            per_task = self._timed_batch(slot, queue, got, acks, sent)
            batch = next_batch(batch, per_task, tasks_per_request(got), self.config.prefetch)

    def _ask(self, slot: int, acks: PendingAcks, want: int,
             ) -> tuple[Queue | None, list[Lease], float, int] | None:
        """Ack what the slot finished and lease up to `want` tasks, queue by queue until one
        has some: (that queue or None, its leases, when the call was sent, ms until the next
        delayed task is due or -1). None when Redis failed (after the outage's backoff)."""
        next_due = -1
        for q in self.queues:
            pending = acks.take(q.name)
            if not want and not pending.tokens:
                continue
            sent = time.monotonic()
            try:
                accepted, got, due = q.ack_and_dequeue(
                    self.name, want, pending.tokens, lease_ms=self.config.lease_ms,
                    idle_handoff=self._handoff and want > 0, durations=pending.durations,
                    tally=self._tallies[q.name], handlers=pending.handlers,
                    runs=self._runs,
                )
            except PASSING as exc:
                # Unreachable, or an error reply (BUSY, LOADING, OOM...): log once, back
                # off, carry on. The heartbeat keeps the leases, the acks stay pending.
                acks.put_back(q.name, pending)
                self._unreserve(want)
                time.sleep(self.outage.failed(f"slot {slot}", exc))
                return None
            self.outage.recovered(f"slot {slot}")
            self._settle(q, pending.tokens, accepted)
            if due >= 0:
                next_due = due if next_due < 0 else min(next_due, due)
            if got:
                self._unreserve(want - len(got))
                return q, got, sent, next_due
            # Nothing here: ask the next queue for the same number.
        return None, [], 0.0, next_due

    def _timed_batch(self, slot: int, queue: Queue, got: list[Lease], acks: PendingAcks,
                     sent: float) -> float:
        """Run a leased batch in the slot; returns the time per task started (s), so that a
        slow task whose batch was given back sends the next batch back to one."""
        started = time.perf_counter()
        self.usage.busy(slot)
        with self._count_lock:
            self._busy += 1
        ran = 0
        try:
            ran = self._run_batch(queue, got, acks, sent)
        finally:
            with self._count_lock:
                self._busy -= 1
            self.usage.idle(slot)
        return (time.perf_counter() - started) / max(ran, 1)

    def _reserve(self, batch: int) -> int:
        """How many tasks this slot may lease now; with --max-tasks, reserved under the lock so
        that slots asking at the same moment cannot together exceed it."""
        with self._count_lock:
            if self.config.max_tasks is None:
                n = batch
            else:
                n = max(0, min(batch, self.config.max_tasks - self.processed - self._inflight))
            self._inflight += n
            return n

    def _unreserve(self, n: int) -> None:
        with self._count_lock:
            self._inflight -= n

    def _done(self, *, failed: bool = False, ran: bool = True) -> None:
        """One leased task is finished (ran: acked or failed) or given back (ran=False)."""
        with self._count_lock:
            self._inflight -= 1
            if ran:
                self.processed += 1
                self.failed += failed
            limit_reached = (
                self.config.max_tasks is not None and self.processed >= self.config.max_tasks
            )
        if limit_reached:
            self.stop()

    def _settle(self, q: Queue, acked: list[str], accepted: list[bool]) -> None:
        if not acked:
            return
        tokens = [lease_of(a) for a in acked]  # an ack may carry its task's result
        self.held.discard(q.name, tokens)
        for token, ok in zip(tokens, accepted, strict=True):
            if not ok:
                rid, tid, _ = token.split("/")
                log.warning("ack refused queue=%s request=%s task=%s worker=%s: the lease was "
                            "lost (expired, released or claimed), so the task runs again",
                            q.name, rid, tid, self.name)

    def _idle(self, next_due_ms: int) -> tuple[Queue, list[Lease]] | None:
        """Block until work arrives; returns tasks handed straight to this worker, if any."""
        timeout = self.config.idle_wait
        if next_due_ms >= 0:
            timeout = min(timeout, max(next_due_ms / 1000, 0.001))
        try:
            woken = wait_for_any(self.queues, timeout, self.name if self._handoff else None)
        except PASSING as exc:
            time.sleep(self.outage.failed("idle wait", exc))
            return None
        if woken is None or not woken[1]:
            return None
        return woken

    def _leave_idle(self) -> None:
        """Take this worker off the idle set and give back tasks handed to it but not taken."""
        if not self._handoff:
            return
        for q in self.queues:
            try:
                leftover = q.leave_idle(self.name, self.config.lease_ms, self._runs)
                if leftover:
                    q.release(leftover)
            except RedisUnavailable:
                pass  # handed-over leases expire and are reaped: nothing is lost

    def _drained(self) -> bool:
        try:
            return all(drained(q, self.registry.names()) for q in self.queues)
        except PASSING:
            return False

    def _run_batch(self, q: Queue, leases: list[Lease], acks: PendingAcks, sent: float) -> int:
        """Run leased tasks in order; returns how many started. `sent`: when the call that
        leased them was sent (monotonic), so each lease is known to be held until sent + its
        length, unless renewed since."""
        ctxs = [TaskContext(lease, q, self.name, sent + lease.lease_ms / 1000) for lease in leases]
        self.held.add(q.name, ctxs)
        self.heartbeat.beater.hold(q.name, ctxs)  # renewed from now on, whatever the handler does
        batch = Batch(q, ctxs)
        with self._start_lock:
            self._batches.add(batch)
        try:
            for i, ctx in enumerate(ctxs):
                if ctx.cancelled:
                    self._give_back(q, [ctx])
                    continue
                if not self._begin(ctx, batch, i):
                    # Stopping, quiet, or given back behind a slow task: the tasks not started
                    # yet go back at once, not counted as attempts.
                    self._give_back(q, ctxs[i:])
                    break
                if not self._still_held(q, ctx):
                    continue
                self._run_one(q, ctx, acks)
        finally:
            with self._start_lock:
                self._batches.discard(batch)
        return sum(c.started for c in ctxs)

    def _send_tallies(self, *, force: bool = False) -> None:
        """Send the metrics tallied for a second (all of them with `force`) that no slot's
        call has taken along (an idle or busy worker's)."""
        for q in self.queues:
            try:
                q.send_tally(self._tallies[q.name], force=force)
            except PASSING as exc:
                if force:  # stopping: a second of counts is lost, not the work
                    log.warning("could not send the handlers' metrics queue=%s worker=%s (%s)",
                                q.name, self.name, exc)

    def _flush_loop(self) -> None:
        """Give back tasks waiting behind a slow one, send acks that waited more than
        ACK_FLUSH_S for their slot's next call, and the metrics tallied for a second."""
        queues = {q.name: q for q in self.queues}
        while not self._flusher_done.wait(ACK_FLUSH_S):
            self._give_back_behind_slow()
            self._send_tallies()
            for pending in self._acks:
                for name, taken in pending.take_older_than(ACK_FLUSH_S).items():
                    try:
                        accepted = queues[name].ack_many(taken.tokens, durations=taken.durations)
                    except PASSING:
                        pending.put_back(name, taken)  # the slot retries with its next call
                        continue
                    self._settle(queues[name], taken.tokens, accepted)

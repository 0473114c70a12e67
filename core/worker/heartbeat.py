"""The heartbeat thread: has the worker's leases and registry entry renewed (by the beat
process, see beat.py, or itself), tells running tasks that their request was cancelled or
their lease lost, and runs the reaper (one worker at a time per queue)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from functools import cache
from importlib import metadata
from typing import Any

from core.queue import Queue, RedisReplyError, RedisUnavailable, registry
from core.queue.prune import prune_workers
from core.queue.reaper import lock_ms_for, reap_queue

from .beat import ProcessBeater, ThreadBeater
from .context import TaskContext
from .held import Held
from .outage import Outage

log = logging.getLogger("queueadmin.worker")
PRUNE_EVERY_S = 60.0
MAX_LISTED_TASKS = 50  # tasks named in the registry entry (the console's workers page)


class Heartbeat(threading.Thread):
    """Beats every `interval` seconds. With `process=True` the renewals themselves run in a
    child process, which goes on while a handler holds the interpreter in native code."""

    def __init__(
        self,
        *,
        worker: str,
        queues: list[Queue],
        held: Held,
        lease_ms: int,
        interval: float,
        reap_interval: float,
        info: Callable[[], dict[str, Any]],
        outage: Outage,
        process: bool = True,
        control: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(name=f"heartbeat-{worker}", daemon=True)
        self.worker = worker
        self.queues = queues
        self.held = held
        self.lease_ms = lease_ms
        self.interval = interval
        self.reap_interval = reap_interval
        self.info = info
        self.outage = outage
        self.control = control  # told, every beat, what an operator asks of the worker
        self._stop_event = threading.Event()
        self._next_prune: dict[str, float] = {}
        self._seen: dict[str, int] = {}  # lease token -> when a beat first saw it held (ms)
        common: dict[str, Any] = dict(worker=worker, queues=queues, lease_ms=lease_ms,
                                      ttl_ms=max(60_000, lease_ms * 3), apply=self.apply,
                                      on_timeout=self.on_timeout)
        self.beater: ThreadBeater | ProcessBeater = (
            ProcessBeater(interval=interval, outage=outage, **common) if process
            else ThreadBeater(**common)
        )

    def start(self) -> None:
        self.beater.start()
        super().start()

    def stop(self) -> None:
        self._stop_event.set()
        self.beater.stop()

    def run(self) -> None:
        next_beat = next_reap = 0.0
        while not self._stop_event.is_set():
            now = time.monotonic()
            try:
                if now >= next_beat:
                    if self.control is not None:  # before the info, so that it says so
                        self.control(self.read_control())
                    # The beater reads Held again as it sends (see ProcessBeater.beat): this
                    # read is only for the registry's list of tasks.
                    self.beater.beat(self.held.snapshot, self._info(self.held.snapshot()))
                    registry.touch(self.queues)  # keeps the queues listed (console, mirror)
                    next_beat = now + self.interval
                    self.flush_progress()
                if now >= next_reap:
                    self.reap()
                    next_reap = now + self.reap_interval
                self.outage.recovered("heartbeat")
                wait = min(next_beat, next_reap) - time.monotonic()
            except (RedisUnavailable, RedisReplyError) as exc:
                wait = self.outage.failed("heartbeat", exc)
                next_beat = 0.0  # beat as soon as Redis answers again
            except Exception:  # a bug must not silently stop the heartbeat: log, keep beating
                log.exception("heartbeat error worker=%s", self.worker)
                wait = self.interval
            self._stop_event.wait(max(0.01, wait))

    def _info(self, held: dict[str, list[TaskContext]]) -> dict[str, Any]:
        """The runtime's info and what the console's workers page shows besides: the worker's
        --dead-after (alive / stale / gone is judged against it), the code version, and the
        tasks it holds with when a beat first saw each (within dead-after / 5 of its lease)."""
        now = int(time.time() * 1000)
        seen, self._seen = self._seen, {}
        tasks: list[dict[str, Any]] = []
        for queue, ctxs in held.items():
            for ctx in ctxs:
                since = self._seen[ctx.lease.lease] = seen.get(ctx.lease.lease, now)
                tasks.append({"queue": queue, "request": ctx.request_id, "task": ctx.task_id,
                              "since": since})
        tasks.sort(key=lambda t: t["since"])
        return self.info() | {"dead_after_ms": self.lease_ms, "version": _version(),
                              "tasks": tasks[:MAX_LISTED_TASKS]}

    def flush_progress(self) -> None:
        """Send the progress running tasks keep back (rate limit): a handler that reported
        and then went quiet is shown as it last said, within a beat."""
        for ctxs in self.held.snapshot().values():
            for ctx in ctxs:
                if not ctx.finished:
                    ctx.flush_progress(due_only=True)

    def read_control(self) -> str:
        """What an operator asks of this worker in any of its queues (the console and
        `manage.py worker` ask in each): "stop" over "quiet" over "" (nothing, or resumed)."""
        asked = {q.worker_control(self.worker) for q in self.queues}
        return next((c for c in ("stop", "quiet") if c in asked), "")

    def apply(self, queue: str, token: str, result: int, sent_at: float) -> None:
        """One renewal's answer: 1 renewed, 2 renewed but cancelled, -1 lease lost."""
        ctx = self.held.get(queue, token)
        if ctx is None:
            return  # finished since
        if result in (1, 2):
            ctx.renewed(sent_at, self.lease_ms)
        if result == 2 and not ctx.cancelled:
            ctx.cancelled = True
            log.info("task cancelled queue=%s request=%s task=%s worker=%s",
                     queue, ctx.request_id, ctx.task_id, self.worker)
        elif result == -1 and not ctx.lost and not ctx.finished:
            # (A finished task's lease may have been acked since the snapshot.)
            ctx.lost = True
            log.warning("lease lost queue=%s request=%s task=%s worker=%s (reaped, claimed "
                        "or released: the task runs again; this run stops at its next "
                        "ctx.check() and its ack will be refused)",
                        queue, ctx.request_id, ctx.task_id, self.worker)

    def on_timeout(self, queue: str, token: str, outcome: str) -> None:
        ctx = self.held.get(queue, token)
        if ctx is not None:
            ctx.timed_out = True
        rid, tid, _ = token.split("/")
        log.warning("task over its time limit queue=%s request=%s task=%s worker=%s -> %s "
                    "(the run is abandoned; it stops at its next ctx.check())",
                    queue, rid, tid, self.worker, outcome)

    def reap(self) -> None:
        """Recover expired leases; a lock per queue lets one worker do it at a time."""
        lock_ms = lock_ms_for(self.reap_interval)
        for q in self.queues:
            if reap_queue(q, self.worker, lock_ms) is None:
                continue
            now = time.monotonic()
            if now >= self._next_prune.get(q.name, 0.0):  # the registry forgets the long gone
                self._next_prune[q.name] = now + PRUNE_EVERY_S
                if pruned := prune_workers(q):
                    log.info("pruned %d workers gone over an hour queue=%s", pruned, q.name)


@cache
def _version() -> str:
    try:
        return metadata.version("queueadmin")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def default_name() -> str:
    """host-pid-random: unique per process, and a valid id (no ':' or spaces)."""
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:40]
    return f"{host or 'host'}-{os.getpid()}-{os.urandom(2).hex()}"

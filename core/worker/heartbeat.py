"""The heartbeat thread: renews the worker's leases and registry entry, tells running tasks
that their request was cancelled, and runs the reaper (one worker at a time per queue)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from core.queue import Queue, RedisUnavailable

from .held import Held
from .outage import Outage

log = logging.getLogger("queueadmin.worker")


class Heartbeat(threading.Thread):
    """Beats every `interval` seconds; keeps running while handlers block in native code
    (it only needs the GIL for a moment per beat)."""

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
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        next_beat = next_reap = 0.0
        while not self._stop_event.is_set():
            now = time.monotonic()
            try:
                if now >= next_beat:
                    self.beat()
                    next_beat = now + self.interval
                if now >= next_reap:
                    self.reap()
                    next_reap = now + self.reap_interval
                self.outage.recovered("heartbeat")
                wait = min(next_beat, next_reap) - time.monotonic()
            except RedisUnavailable as exc:
                wait = self.outage.failed("heartbeat", exc)
                next_beat = 0.0  # beat as soon as Redis answers again
            except Exception:  # a bug must not silently stop the heartbeat: log, keep beating
                log.exception("heartbeat error worker=%s", self.worker)
                wait = self.interval
            self._stop_event.wait(max(0.01, wait))

    def beat(self) -> None:
        """Renew every held lease; flag tasks whose request is cancelled or whose lease is lost."""
        held = self.held.snapshot()
        info = self.info()
        for q in self.queues:
            ctxs = held.get(q.name, [])
            results = q.heartbeat(
                self.worker, info, [c.lease.lease for c in ctxs],
                ttl_ms=max(60_000, self.lease_ms * 3), lease_ms=self.lease_ms,
            )
            for ctx, r in zip(ctxs, results, strict=True):
                if r == 2 and not ctx.cancelled:
                    ctx.cancelled = True
                    log.info("task cancelled queue=%s request=%s task=%s worker=%s",
                             q.name, ctx.request_id, ctx.task_id, self.worker)
                elif r == -1 and not ctx.lost and not ctx.finished:
                    # (A finished task's lease may have been acked since the snapshot.)
                    ctx.lost = True
                    log.warning("lease lost queue=%s request=%s task=%s worker=%s "
                                "(it will run again elsewhere; this run's ack will be refused)",
                                q.name, ctx.request_id, ctx.task_id, self.worker)

    def reap(self) -> None:
        """Recover expired leases; a lock per queue lets one worker do it at a time."""
        # A little shorter than the interval, so the worker that reaped last time does not
        # find its own lock still there and skip a round.
        lock_ms = max(100, int(self.reap_interval * 900))
        for q in self.queues:
            if not q.try_reaper_lock(self.worker, lock_ms):
                continue
            while True:
                reaped = q.reap(limit=500)
                for r in reaped:
                    log.warning("recovered task queue=%s request=%s task=%s from worker=%s -> %s",
                                q.name, r.request_id, r.task_id, r.worker, r.outcome)
                if len(reaped) < 500:
                    break


def default_name() -> str:
    """host-pid-random: unique per process, and a valid id (no ':' or spaces)."""
    host = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:40]
    return f"{host or 'host'}-{os.getpid()}-{os.urandom(2).hex()}"

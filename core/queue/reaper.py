"""Recovering expired leases: what every worker runs for its own queues, and what the services
process runs for every registered queue, so that a queue whose workers are all gone still has
its expired leases, and the leases an operator revoked, moved on at their time (issue 33: six
revoked leases were held 20 minutes past their expiry on a queue with no live worker).

One reap at a time per queue, whoever runs it: the queue's reaper lock (a short SET NX PX).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from . import registry
from .client import Queue
from .errors import QueueError
from .models import Reaped

log = logging.getLogger("queueadmin.reaper")

REAP_BATCH = 500  # leases per call; a call that fills it is followed by another
INTERVAL_S = 1.0  # the services process's round over every queue


def lock_ms_for(interval_s: float) -> int:
    """A reaper lock a little shorter than the interval, so that the holder that reaped last
    does not find its own lock still there at its next round and skip it."""
    return max(100, int(interval_s * 900))


def reap_queue(q: Queue, holder: str, lock_ms: int) -> list[Reaped] | None:
    """Reap `q` (expired leases back to waiting or to the dead letters; revoked leases past
    their old expiry moved on) if `holder` takes the queue's reaper lock; None if another
    holds it. Each recovery is logged, naming the worker that held the lease."""
    if not q.try_reaper_lock(holder, lock_ms):
        return None
    out: list[Reaped] = []
    while True:
        reaped = q.reap(limit=REAP_BATCH)
        for r in reaped:
            log.warning("recovered task queue=%s request=%s task=%s from worker=%s -> %s "
                        "(by %s)", q.name, r.request_id, r.task_id, r.worker, r.outcome, holder)
        out += reaped
        if len(reaped) < REAP_BATCH:
            return out


class Reaper:
    """Reaps every queue registered under a prefix, once a second, from outside any worker
    (the services process runs it). `make_queue` builds a queue by name."""

    def __init__(self, client: object, make_queue: Callable[[str], Queue], *,
                 prefix: str = "qa", holder: str = "services",
                 interval: float = INTERVAL_S) -> None:
        self.client = client
        self.make_queue = make_queue
        self.prefix = prefix
        self.holder = holder
        self.interval = interval
        self._queues: dict[str, Queue] = {}

    def tick(self) -> int:
        """One round over the registered queues; returns how many leases it recovered."""
        n = 0
        for name in registry.names(self.client, prefix=self.prefix):
            q = self._queues.get(name)
            if q is None:
                q = self._queues[name] = self.make_queue(name)
            n += len(reap_queue(q, self.holder, lock_ms_for(self.interval)) or ())
        return n

    def run(self, stop: threading.Event) -> None:
        """Tick every `interval` until `stop` is set; a Redis failure is logged and the next
        round tries again."""
        failing = False
        while not stop.is_set():
            try:
                self.tick()
            except QueueError as exc:
                if not failing:
                    log.warning("reaper round failed (tried again each second): %s", exc)
                failing = True
            else:
                if failing:
                    log.info("reaper rounds succeed again")
                failing = False
            stop.wait(self.interval)


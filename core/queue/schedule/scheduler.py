"""The scheduler loop (`manage.py runscheduler`, one supervised process of the stack): a tick
each second, aligned to the Redis server's clock, over every queue of the registry (or the
queues given). Any number may run: see fire.py for why each slot fires exactly once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from core.queue import Queue, registry
from core.queue.errors import QueueError

from .fire import DUE_BATCH, TickReport, tick
from .store import JobSubmit, Schedules

log = logging.getLogger("queueadmin.schedule")
TICK_S = 1.0
ALIGN_AFTER_S = 0.005  # tick just after the second: a slot at :00.000 is due then


@dataclass
class Totals:
    ticks: int = 0
    cpu_s: float = 0.0
    report: TickReport = field(default_factory=TickReport)
    failures: int = 0  # ticks that Redis failed (retried at the next)


class Scheduler:
    """Fires the due slots of the schedules of `queues` (every registered queue if empty);
    `submit_job` submits the runs of data job schedules (store.JobSubmit)."""

    def __init__(self, client: Any, *, prefix: str = "qa", queues: Sequence[str] = (),
                 clock: Callable[[], int] | None = None,
                 submit_job: JobSubmit | None = None) -> None:
        self.client = client
        self.prefix = prefix
        self.queues = tuple(queues)
        self.clock = clock
        self.submit_job = submit_job
        self._stores: dict[str, Schedules] = {}
        self._offset_s = 0.0  # Redis' clock minus ours, measured at each tick

    def store(self, name: str) -> Schedules:
        store = self._stores.get(name)
        if store is None:
            q = Queue(self.client, name, prefix=self.prefix, clock=self.clock)
            store = self._stores[name] = Schedules(q, submit_job=self.submit_job)
        return store

    def queue_names(self) -> list[str]:
        return list(self.queues) or registry.names(self.client, prefix=self.prefix)

    def now_ms(self, store: Schedules) -> int:
        if self.clock is not None:
            return self.clock()
        before = time.time()
        now = store.now_ms()
        self._offset_s = now / 1000 - (before + time.time()) / 2
        return now

    def tick(self) -> TickReport:
        """One pass over every queue: fire whatever is due now."""
        report = TickReport()
        for name in self.queue_names():
            store = self.store(name)
            while True:
                part = tick(store, self.now_ms(store))
                report.add(part)
                if part.due < DUE_BATCH:
                    break
        return report

    def run(self, stop: threading.Event, *, max_ticks: int | None = None,
            on_tick: Callable[[TickReport], None] | None = None) -> Totals:
        """Tick each second until `stop` is set (or `max_ticks`). A Redis failure is logged
        and the next tick tries again; the slots it missed are still due then."""
        totals = Totals()
        while not stop.is_set() and (max_ticks is None or totals.ticks < max_ticks):
            cpu = time.process_time()
            try:
                part = self.tick()
            except (QueueError, redis.RedisError) as exc:  # a data job's submit: raw Redis
                totals.failures += 1
                log.warning("scheduler tick failed (retried at the next): %s", exc)
                part = TickReport()
            totals.ticks += 1
            totals.cpu_s += time.process_time() - cpu
            totals.report.add(part)
            totals.report.fired_ids.clear()  # kept per tick only
            if on_tick is not None:
                on_tick(part)
            if self.clock is None:
                # Sleep to just after the next whole second of Redis' clock.
                server_now = time.time() + self._offset_s
                stop.wait(TICK_S - server_now % TICK_S + ALIGN_AFTER_S)
            elif max_ticks is None:
                stop.wait(TICK_S)
        return totals

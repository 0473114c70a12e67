"""What a worker says about itself with its heartbeat, for the console's workers page: memory
(RSS), CPU and slot utilization over the last minute. Read from /proc/self/statm and
os.times(): no dependency, nothing sampled between beats."""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from typing import Any

WINDOW_S = 60.0  # CPU and utilization are over this much of the recent past (or uptime)


def rss_bytes() -> int | None:
    """The process's resident memory now, or None where /proc is not there (not Linux)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            resident = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return resident * os.sysconf("SC_PAGE_SIZE")


def cpu_seconds() -> float:
    """CPU time of this process so far (user and system, all its threads)."""
    t = os.times()
    return t.user + t.system


class Usage:
    """Busy slot time and CPU time, sampled at each beat; rates over the last WINDOW_S.

    A slot is busy from the moment it starts a batch of leased tasks until it has finished
    it: busy(slot) and idle(slot) around each batch (two clock reads and a lock per batch,
    not per task)."""

    def __init__(self, slots: int, clock: Any = time.monotonic,
                 cpu: Any = cpu_seconds) -> None:
        self.slots = slots
        self._clock = clock
        self._cpu = cpu
        self._lock = threading.Lock()
        self._busy_done = 0.0  # seconds of finished batches
        self._since: dict[int, float] = {}  # slot -> when its running batch started
        now = clock()
        # (when, busy seconds so far, CPU seconds so far), oldest first
        self._samples: deque[tuple[float, float, float]] = deque([(now, 0.0, cpu())])

    def busy(self, slot: int) -> None:
        with self._lock:
            self._since[slot] = self._clock()

    def idle(self, slot: int) -> None:
        with self._lock:
            started = self._since.pop(slot, None)
            if started is not None:
                self._busy_done += self._clock() - started

    def _busy_total(self, now: float) -> float:
        with self._lock:
            return self._busy_done + sum(now - s for s in self._since.values())

    def sample(self) -> dict[str, Any]:
        """Take a sample; returns the info fields: rss (bytes), cpu (% of one core) and util
        (% of the slots' time spent running tasks), each over the last WINDOW_S at most."""
        now = self._clock()
        busy, cpu = self._busy_total(now), self._cpu()
        samples = self._samples
        # Keep the newest sample at least WINDOW_S old as the window's start.
        while len(samples) > 1 and now - samples[1][0] >= WINDOW_S:
            samples.popleft()
        then, busy0, cpu0 = samples[0]
        samples.append((now, busy, cpu))
        span = now - then
        out: dict[str, Any] = {"rss": rss_bytes()}
        if span > 0:
            out["cpu"] = round(100 * (cpu - cpu0) / span, 1)
            out["util"] = round(min(100.0, 100 * (busy - busy0) / (span * self.slots)), 1)
        return out

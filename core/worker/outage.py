"""Redis outages: log once when Redis goes away and once when it is back; each thread retries
with its own capped exponential backoff."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("queueadmin.worker")


class Outage:
    """Shared by a worker's threads, so an outage is one log line, not one per thread; the
    backoff is per thread, so one thread retrying often cannot push another's delay up."""

    def __init__(self, *, first: float = 0.1, cap: float = 2.0) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._local = threading.local()
        self.first = first
        self.cap = cap

    def failed(self, where: str, exc: Exception) -> float:
        """Record a failure; returns how long this thread should wait before retrying."""
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
                log.error("Redis unavailable (%s): %s; retrying with backoff up to %.0fs",
                          where, exc, self.cap)
        tries = getattr(self._local, "tries", 0)
        self._local.tries = tries + 1
        return float(min(self.first * 2**tries, self.cap))

    def recovered(self, where: str) -> None:
        self._local.tries = 0
        if self._since is None:
            return
        with self._lock:
            if self._since is not None:
                log.warning("Redis is back (%s) after %.1fs", where, time.monotonic() - self._since)
                self._since = None

    @property
    def down(self) -> bool:
        return self._since is not None

"""Redis outages: log once when Redis goes away and once when it is back; capped backoff."""

from __future__ import annotations

import logging
import threading
import time

log = logging.getLogger("queueadmin.worker")


class Outage:
    """Shared by a worker's threads, so an outage is one log line, not one per thread."""

    def __init__(self, *, first: float = 0.1, cap: float = 5.0) -> None:
        self._lock = threading.Lock()
        self._since: float | None = None
        self._delay = 0.0
        self.first = first
        self.cap = cap

    def failed(self, where: str, exc: Exception) -> float:
        """Record a failure; returns how long the caller should wait before retrying."""
        with self._lock:
            if self._since is None:
                self._since = time.monotonic()
                self._delay = self.first
                log.error("Redis unavailable (%s): %s; retrying with backoff up to %.0fs",
                          where, exc, self.cap)
            else:
                self._delay = min(self._delay * 2, self.cap)
            return self._delay

    def recovered(self, where: str) -> None:
        if self._since is None:
            return
        with self._lock:
            if self._since is not None:
                log.warning("Redis is back (%s) after %.1fs", where, time.monotonic() - self._since)
                self._since = None
                self._delay = 0.0

    def delay(self) -> float:
        return self._delay

    @property
    def down(self) -> bool:
        return self._since is not None

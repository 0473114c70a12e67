"""Finished tasks whose ack has not been sent yet, per slot. Acks normally ride on the slot's
next dequeue (one round trip for both); the worker's flusher sends any that waited longer
than a moment, so a quick task's ack is not held back behind a slow task of the same batch
(and lost if the worker dies during it). Each ack carries its run's time (seconds) and its
handler, for the handler's metrics: counted in the worker's Tally once the engine accepts the
ack (core/queue/metrics.py)."""

from __future__ import annotations

import threading
import time
from typing import NamedTuple


class Acks(NamedTuple):
    """Lease tokens and, in the same order, how long each task ran (seconds) and its
    handler."""

    tokens: list[str]
    durations: list[float | None]
    handlers: list[str]


class PendingAcks:
    """Tokens by queue name; thread-safe (the slot and the flusher both take from it)."""

    def __init__(self, queues: list[str]) -> None:
        self._lock = threading.Lock()
        self._by_queue: dict[str, Acks] = {q: Acks([], [], []) for q in queues}
        self._since: float | None = None  # when the oldest pending ack was added

    def add(self, queue: str, token: str, duration: float | None, handler: str) -> None:
        with self._lock:
            acks = self._by_queue[queue]
            acks.tokens.append(token)
            acks.durations.append(duration)
            acks.handlers.append(handler)
            if self._since is None:
                self._since = time.monotonic()

    def take(self, queue: str) -> Acks:
        """Everything pending for `queue`; the caller sends it, or puts it back."""
        with self._lock:
            acks = self._by_queue[queue]
            self._by_queue[queue] = Acks([], [], [])
            if not any(a.tokens for a in self._by_queue.values()):
                self._since = None
            return acks

    def take_older_than(self, age: float) -> dict[str, Acks]:
        """Everything pending, if the oldest ack has waited at least `age` seconds."""
        with self._lock:
            if self._since is None or time.monotonic() - self._since < age:
                return {}
            taken = {q: a for q, a in self._by_queue.items() if a.tokens}
            self._by_queue = {q: Acks([], [], []) for q in self._by_queue}
            self._since = None
            return taken

    def put_back(self, queue: str, acks: Acks) -> None:
        """Sending failed: they go first next time."""
        if not acks.tokens:
            return
        with self._lock:
            mine = self._by_queue[queue]
            mine.tokens[:0] = acks.tokens
            mine.durations[:0] = acks.durations
            mine.handlers[:0] = acks.handlers
            if self._since is None:
                self._since = time.monotonic()

"""Finished tasks whose ack has not been sent yet, per slot. Acks normally ride on the slot's
next dequeue (one round trip for both); the worker's flusher sends any that waited longer
than a moment, so a quick task's ack is not held back behind a slow task of the same batch
(and lost if the worker dies during it)."""

from __future__ import annotations

import threading
import time


class PendingAcks:
    """Tokens by queue name; thread-safe (the slot and the flusher both take from it)."""

    def __init__(self, queues: list[str]) -> None:
        self._lock = threading.Lock()
        self._by_queue: dict[str, list[str]] = {q: [] for q in queues}
        self._since: float | None = None  # when the oldest pending ack was added

    def add(self, queue: str, token: str) -> None:
        with self._lock:
            self._by_queue[queue].append(token)
            if self._since is None:
                self._since = time.monotonic()

    def take(self, queue: str) -> list[str]:
        """Everything pending for `queue`; the caller sends it, or puts it back."""
        with self._lock:
            tokens = self._by_queue[queue]
            self._by_queue[queue] = []
            if not any(self._by_queue.values()):
                self._since = None
            return tokens

    def take_older_than(self, age: float) -> dict[str, list[str]]:
        """Everything pending, if the oldest ack has waited at least `age` seconds."""
        with self._lock:
            if self._since is None or time.monotonic() - self._since < age:
                return {}
            taken = {q: t for q, t in self._by_queue.items() if t}
            self._by_queue = {q: [] for q in self._by_queue}
            self._since = None
            return taken

    def put_back(self, queue: str, tokens: list[str]) -> None:
        """Sending failed: they go first next time."""
        if not tokens:
            return
        with self._lock:
            self._by_queue[queue][:0] = tokens
            if self._since is None:
                self._since = time.monotonic()

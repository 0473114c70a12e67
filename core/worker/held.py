"""The leases a worker process holds right now, shared by its slots and its heartbeat, and
the batches its slots are running."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .context import TaskContext

if TYPE_CHECKING:
    from core.queue import Queue


class Batch:
    """Tasks one slot leased in one call, run in order. `at` is the index of the task that
    runs (or ran last) and `since` when it started (monotonic, 0 before the first); both are
    set under the worker's start lock, so that a task running long can give back the ones
    behind it that no slot has started (Worker._give_back_behind_slow)."""

    __slots__ = ("at", "ctxs", "queue", "since")

    def __init__(self, queue: Queue, ctxs: list[TaskContext]) -> None:
        self.queue = queue
        self.ctxs = ctxs
        self.at = -1
        self.since = 0.0


class Held:
    """Task contexts by queue name and lease token; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_queue: dict[str, dict[str, TaskContext]] = {}

    def add(self, queue: str, ctxs: Iterable[TaskContext]) -> None:
        with self._lock:
            table = self._by_queue.setdefault(queue, {})
            for ctx in ctxs:
                table[ctx.lease.lease] = ctx

    def discard(self, queue: str, tokens: Iterable[str]) -> None:
        with self._lock:
            table = self._by_queue.get(queue)
            if table:
                for token in tokens:
                    table.pop(token, None)

    def get(self, queue: str, token: str) -> TaskContext | None:
        with self._lock:
            return self._by_queue.get(queue, {}).get(token)

    def snapshot(self) -> dict[str, list[TaskContext]]:
        with self._lock:
            return {q: list(t.values()) for q, t in self._by_queue.items() if t}

    def count(self) -> int:
        with self._lock:
            return sum(len(t) for t in self._by_queue.values())

"""The leases a worker process holds right now, shared by its slots and its heartbeat."""

from __future__ import annotations

import threading
from collections.abc import Iterable

from .context import TaskContext


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

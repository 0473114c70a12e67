"""Upkeep of the worker registry: a worker that was killed never unregisters, so its entry
in the `workers` index would stay forever (its info hash expires on its own)."""

from __future__ import annotations

from .base import QueueBase, int_in, translated

WORKER_RETENTION_MS = 3_600_000  # an hour: long enough to see in the console who died
MIN_RETENTION_MS = 60_000  # a living worker beats far more often than this


def prune_workers(queue: QueueBase, older_than_ms: int = WORKER_RETENTION_MS) -> int:
    """Remove from the registry the workers whose last heartbeat is older than
    `older_than_ms`; returns how many. One command, however many there are."""
    int_in(older_than_ms, "older_than_ms", MIN_RETENTION_MS)
    cutoff = queue.now_ms() - older_than_ms
    with translated("prune workers"):
        return int(queue.redis.zremrangebyscore(queue.keys.workers, "-inf", f"({cutoff}"))

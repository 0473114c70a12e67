"""Upkeep of the worker registry: a worker that was killed never unregisters, so its entry
in the `workers` index would stay forever (its info hash expires on its own); a worker an
operator stopped stays listed as stopped (keys.stopped_workers) until its stack restarts, a
week at most."""

from __future__ import annotations

from collections.abc import Callable

from .base import QueueBase, int_in, translated
from .consume import STOPPED_KEPT_MS

WORKER_RETENTION_MS = 3_600_000  # an hour: long enough to see in the console who died
MIN_RETENTION_MS = 60_000  # a living worker beats far more often than this


def prune_workers(queue: QueueBase, older_than_ms: int = WORKER_RETENTION_MS) -> int:
    """Remove from the registry the workers whose last heartbeat is older than
    `older_than_ms`, and from the stopped ones those stopped over STOPPED_KEPT_MS ago;
    returns how many of the registry. One round trip, however many there are."""
    int_in(older_than_ms, "older_than_ms", MIN_RETENTION_MS)
    now = queue.now_ms()
    cutoff = now - older_than_ms
    with translated("prune workers"):
        pipe = queue.redis.pipeline(transaction=False)
        pipe.zremrangebyscore(queue.keys.workers, "-inf", f"({cutoff}")
        # The stopped ones' entries have expired by then (their own TTL).
        pipe.zremrangebyscore(queue.keys.stopped_workers, "-inf", f"({now - STOPPED_KEPT_MS}")
        pruned, _ = pipe.execute()
    return int(pruned)


def forget_stopped(queue: QueueBase, match: Callable[[str], bool]) -> int:
    """Forget the workers an operator stopped whose names `match` (a stack starting again:
    those of its earlier life, which it starts again under new names), so that they are no
    longer listed as stopped; returns how many. Two round trips: the index holds the stops of
    a week at most."""
    with translated("forget stopped workers"):
        names = [str(n) for n in queue.redis.zrange(queue.keys.stopped_workers, 0, -1)
                 if match(str(n))]
        if not names:
            return 0
        pipe = queue.redis.pipeline(transaction=False)
        pipe.zrem(queue.keys.stopped_workers, *names)
        for name in names:
            pipe.delete(queue.keys.worker(name))
        return int(pipe.execute()[0])

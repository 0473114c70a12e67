"""Per-queue aggregates that every page header, the overview and /metrics read, cached for
about a second (CONSOLE_CACHE_S) so that many open tabs polling every few seconds cost Redis
one read per queue per second, not one per tab.

Each aggregate is a bounded number of commands on the engine's counters and indexes (the
`stats` hash, ZCARD, XLEN, ZCOUNT, a few heads of sorted sets): nothing here reads a number of
keys or entries that grows with the number of tasks or requests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar, cast

from django.conf import settings
from django.core.cache import cache

from core.conf import redis_client
from core.queue import Queue, read

T = TypeVar("T")
DEFAULT_CACHE_S = 1.0
# A worker that beat in the last 15 s counts as live on the overview (workers beat every
# dead-after / 5; the workers page judges each against its own --dead-after).
LIVE_WORKER_MS = 15_000
# The oldest waiting work: the oldest requests (by submit time) are looked at, not all.
OLDEST_CHECKED = 20


def cached(key: str, compute: Callable[[], T], *, factor: float = 1.0) -> T:
    """compute(), shared by every request of this process for CONSOLE_CACHE_S seconds (times
    `factor`). Failures are not cached: the next request asks Redis again, so the console
    recovers as soon as Redis answers. CONSOLE_CACHE_S = 0 turns the cache off (tests)."""
    ttl = float(getattr(settings, "CONSOLE_CACHE_S", DEFAULT_CACHE_S)) * factor
    full = "console:" + hashlib.sha1(f"{settings.REDIS_URL}|{key}".encode()).hexdigest()
    if ttl > 0:
        hit = cache.get(full)
        if hit is not None:
            return cast(T, hit)
    value = compute()
    if ttl > 0:
        cache.set(full, value, ttl)
    return value


@dataclass(frozen=True)
class QueueSummary:
    name: str
    stats: read.QueueStats
    now_ms: int
    registered_workers: int  # in the registry, live or not (until pruned)
    expired_leases: int  # leases past their expiry that the reaper has not recovered yet
    oldest_waiting_ms: int | None  # submit time of the oldest request with waiting tasks

    @property
    def live_workers(self) -> int:
        return self.stats.workers

    @property
    def stale_workers(self) -> int:
        return max(0, self.registered_workers - self.stats.workers)

    @property
    def requests(self) -> int:
        return sum(self.stats.requests_by_state.values())

    @property
    def unattended(self) -> bool:
        """Work waits and no worker is there to take it."""
        return (self.stats.waiting + self.stats.delayed) > 0 and self.stats.workers == 0


def summary(queue: Queue) -> QueueSummary:
    """The queue's aggregates (cached)."""
    return cached(f"summary|{queue.keys.prefix}|{queue.name}", lambda: _summary(queue))


def _summary(queue: Queue) -> QueueSummary:
    stats = read.stats(queue, worker_timeout_ms=LIVE_WORKER_MS)
    a = read.attention(queue, checked=OLDEST_CHECKED)
    return QueueSummary(queue.name, stats, a.now_ms, a.registered_workers, a.expired_leases,
                        a.oldest_waiting_ms)


def mirror_lag(queue: Queue, group: str = "mirror") -> float | None:
    """How far the database's history is behind the queue, in seconds: the age of the oldest
    event (or dead letter) the mirror's consumer group has not written yet; 0.0 when it has
    them all, None when no mirror has ever read the queue (cached)."""
    from core.queue.follow import lag

    # In a tuple: the cache cannot tell a None it holds from a miss.
    held: tuple[float | None] = cached(f"mirror-lag|{queue.keys.prefix}|{queue.name}|{group}",
                                       lambda: (lag(queue, group, now_ms=queue.now_ms()),))
    return held[0]


def redis_health() -> read.RedisHealth:
    """INFO of the console's Redis (one node of a cluster), cached."""
    return cached("health", lambda: read.redis_health(redis_client()))

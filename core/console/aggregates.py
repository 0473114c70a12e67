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
from typing import Any, TypeVar, cast

import redis
from django.conf import settings
from django.core.cache import cache

from core.conf import redis_client
from core.queue import Queue, introspect
from core.queue.client import translated

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
    stats: introspect.QueueStats
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
    stats = introspect.stats(queue, worker_timeout_ms=LIVE_WORKER_MS)
    a = introspect.attention(queue, checked=OLDEST_CHECKED)
    return QueueSummary(queue.name, stats, a.now_ms, a.registered_workers, a.expired_leases,
                        a.oldest_waiting_ms)


@dataclass(frozen=True)
class RedisHealth:
    version: str
    uptime_s: int
    used_memory: str
    maxmemory: str
    clients: int
    aof: bool
    appendfsync: str  # "" when CONFIG is not allowed (a managed Redis)
    rdb_status: str
    nodes: int

    @property
    def uptime_ms(self) -> int:
        return self.uptime_s * 1000


def redis_health() -> RedisHealth:
    """INFO of the console's Redis (one node of a cluster), cached."""
    return cached("health", _redis_health)


def _redis_health() -> RedisHealth:
    client: Any = redis_client()
    with translated("redis info"):
        info = client.info()
    # A cluster client asks one node; the page says how many primaries the cluster has.
    nodes = len(client.get_primaries()) if hasattr(client, "get_primaries") else 1
    if "redis_version" not in info:  # answers per node
        info = next(iter(info.values()))
    fsync = ""
    try:
        got = client.config_get("appendfsync")
        got = next(iter(got.values())) if got and isinstance(next(iter(got.values())), dict) \
            else got
        fsync = str(got.get("appendfsync", ""))
    except (redis.ResponseError, redis.ConnectionError, redis.TimeoutError):
        pass  # CONFIG disabled (managed Redis): the page says "not readable"
    return RedisHealth(
        version=str(info.get("redis_version", "")),
        uptime_s=int(info.get("uptime_in_seconds", 0)),
        used_memory=str(info.get("used_memory_human", "")),
        maxmemory=str(info.get("maxmemory_human", "0B")),
        clients=int(info.get("connected_clients", 0)),
        aof=bool(int(info.get("aof_enabled", 0))),
        appendfsync=fsync,
        rdb_status=str(info.get("rdb_last_bgsave_status", "")),
        nodes=nodes,
    )

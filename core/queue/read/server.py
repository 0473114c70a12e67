"""The Redis server the engine runs on, as its own figures: whether it answers, its health
(INFO and CONFIG GET, for the console's overview), and what it has spent so far (command
statistics and CPU, for the benchmarks). Per server, not per queue: each takes a client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

from ..base import translated


def ping(client: Any) -> None:
    """Nothing if Redis answers; RedisUnavailable (or RedisReplyError) if not."""
    with translated("ping"):
        client.ping()


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
    # What the alerts read (issue 36): bytes (maxmemory 0: no limit) and the append-only
    # file's last write and rewrite ("ok", "err"; "" when AOF is off).
    used_memory_bytes: int = 0
    maxmemory_bytes: int = 0
    aof_write_status: str = ""
    aof_rewrite_status: str = ""

    @property
    def uptime_ms(self) -> int:
        return self.uptime_s * 1000


def redis_health(client: Any) -> RedisHealth:
    """INFO of the Redis (one node of a cluster, and how many primaries the cluster has)."""
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
    aof = bool(int(info.get("aof_enabled", 0)))
    return RedisHealth(
        version=str(info.get("redis_version", "")),
        uptime_s=int(info.get("uptime_in_seconds", 0)),
        used_memory=str(info.get("used_memory_human", "")),
        maxmemory=str(info.get("maxmemory_human", "0B")),
        clients=int(info.get("connected_clients", 0)),
        aof=aof,
        appendfsync=fsync,
        rdb_status=str(info.get("rdb_last_bgsave_status", "")),
        nodes=nodes,
        used_memory_bytes=int(info.get("used_memory", 0)),
        maxmemory_bytes=int(info.get("maxmemory", 0)),
        aof_write_status=str(info.get("aof_last_write_status", "")) if aof else "",
        aof_rewrite_status=str(info.get("aof_last_bgrewrite_status", "")) if aof else "",
    )


def command_stats(client: Any) -> dict[str, tuple[int, int]]:
    """Per command Redis has run so far: (calls, microseconds spent), from INFO commandstats
    (a command a script sends counts there too)."""
    with translated("command stats"):
        stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
            for k, v in stats.items()}


def cpu_seconds(client: Any) -> float:
    """CPU seconds redis-server's main thread has used so far (user + system): scripts,
    commands, the append-only file's writes and the network."""
    with translated("cpu"):
        cpu = client.info("cpu")
    return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])

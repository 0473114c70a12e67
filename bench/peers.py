"""The Python task queues measured beside ours (`pip install -e '.[bench]'`): huey and rq,
each with a no-op task, on the redis-server the benchmark started.

Their workers import this module too (`huey_consumer bench.peers.huey`, `rq worker`), so
the Redis they use comes from BENCH_REDIS_URL, which the benchmark sets for them.
"""

from __future__ import annotations

import importlib.util
import os
import time
from typing import Any

HAVE_HUEY = importlib.util.find_spec("huey") is not None
HAVE_RQ = importlib.util.find_spec("rq") is not None


def noop(n: Any) -> None:
    """The peers' task: does nothing."""


def make_huey(url: str) -> tuple[Any, Any]:
    """huey at its fastest here (Redis storage, no result stored) and its no-op task. Its
    latency task is registered too (huey_latency_task() finds it)."""
    from huey import RedisHuey

    h = RedisHuey("bench", url=url, results=False)
    task = h.task(name="noop")(noop)

    @h.task(name="latency")
    def latency(key: str, t: int) -> None:
        """Records how long after its enqueue the task started (ns), as ours does."""
        started = time.time_ns()
        h.storage.conn.rpush(key, started - t)

    h.bench_latency = latency
    return h, task


def huey_latency_task(h: Any) -> Any:
    """The latency task of a huey made by make_huey()."""
    return h.bench_latency


def huey_sample_count(h: Any, key: str) -> int:
    """How many latency samples huey's latency task has written under `key` (in huey's
    Redis, through huey's own client)."""
    return int(h.storage.conn.llen(key))


def huey_samples(h: Any, key: str) -> list[int]:
    """The latency samples (ns) huey's latency task has written under `key`."""
    return [int(x) for x in h.storage.conn.lrange(key, 0, -1)]


def huey_clear_samples(h: Any, key: str) -> None:
    """Forget the samples written so far (the warm-up's)."""
    h.storage.conn.delete(key)


def make_rq(url: str) -> Any:
    """An rq queue on `url` (rq needs a client without decode_responses)."""
    import redis
    import rq

    return rq.Queue("bench", connection=redis.Redis.from_url(url))


# What `huey_consumer bench.peers.huey` serves; None outside a benchmark's worker.
huey, huey_noop = (
    make_huey(os.environ["BENCH_REDIS_URL"])
    if HAVE_HUEY and "BENCH_REDIS_URL" in os.environ
    else (None, None)
)

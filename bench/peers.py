"""The Python task queues measured beside ours (`pip install -e '.[bench]'`): huey and rq,
each with a no-op task, on the redis-server the benchmark started.

Their workers import this module too (`huey_consumer bench.peers.huey`, `rq worker`), so
the Redis they use comes from BENCH_REDIS_URL, which the benchmark sets for them.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

HAVE_HUEY = importlib.util.find_spec("huey") is not None
HAVE_RQ = importlib.util.find_spec("rq") is not None


def noop(n: Any) -> None:
    """The peers' task: does nothing."""


def make_huey(url: str) -> tuple[Any, Any]:
    """huey at its fastest here (Redis storage, no result stored) and its no-op task."""
    from huey import RedisHuey

    h = RedisHuey("bench", url=url, results=False)
    return h, h.task(name="noop")(noop)


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

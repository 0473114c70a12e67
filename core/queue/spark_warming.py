"""Whether the Spark that data jobs run on is still warming up: a marker per key prefix
(keys.spark_warming_key) that `manage.py warmspark` (which the stack runs after starting its
Spark Connect server) sets while it waits for the server and runs a first job on it, and
removes once Spark is warm or the warm-up gave up. A first data job meanwhile waits for Spark
(a cold server took 50 s for a job that takes 1 s warm); the console and `datajob submit` read
the marker to say so. It expires by itself, so a warm-up killed mid-way leaves none behind.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from .base import QueueBase, translated
from .keys import spark_warming_key

STARTING = "starting"  # the server does not listen yet
FIRST_JOB = "first job"  # it listens; the warm-up's job runs


@dataclass(frozen=True)
class SparkWarming:
    """A warm-up under way: which server, since when (ms), and how far (STARTING, FIRST_JOB)."""

    url: str
    since_ms: int
    phase: str

    def describe(self, now_ms: int | None = None) -> str:
        """"Spark is warming up (starting, 12 s so far)"."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        seconds = max(0, round((now - self.since_ms) / 1000))
        what = "its server is starting" if self.phase == STARTING else "its first job runs"
        return f"Spark is warming up ({what}, {seconds} s so far)"


def mark(client: Any, *, prefix: str, url: str, phase: str, ttl_s: float,
         since_ms: int | None = None) -> None:
    """Say that the Spark at `url` warms up (`phase`) for at most `ttl_s` more seconds."""
    key = spark_warming_key(prefix)
    since = int(time.time() * 1000) if since_ms is None else since_ms
    with translated("spark warming"):
        pipe = client.pipeline(transaction=True)
        pipe.hset(key, mapping={"url": url, "since_ms": since, "phase": phase})
        pipe.expire(key, max(1, round(ttl_s)))
        pipe.execute()


def clear(client: Any, *, prefix: str) -> None:
    """Spark is warm (or its warm-up gave up): nothing to say any more."""
    with translated("spark warming"):
        client.delete(spark_warming_key(prefix))


def read(client: Any, *, prefix: str) -> SparkWarming | None:
    """The warm-up under way for `prefix`, or None (warm, never warmed, or not ours to say)."""
    with translated("spark warming"):
        h = client.hgetall(spark_warming_key(prefix))
    if not h:
        return None
    h = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
         for k, v in h.items()}
    try:
        since = int(h.get("since_ms") or 0)
    except ValueError:
        since = 0
    return SparkWarming(url=str(h.get("url", "")), since_ms=since,
                        phase=str(h.get("phase") or FIRST_JOB))


def read_beside(q: QueueBase) -> SparkWarming | None:
    """read() for the Redis and prefix of `q`."""
    return read(q.redis, prefix=q.keys.prefix)

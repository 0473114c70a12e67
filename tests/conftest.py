"""Shared fixtures: a redis-server the suite starts itself, a fresh key prefix per test, and
a clock the test controls."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from core.queue import Queue
from core.redis_server import RedisServer, start_redis


class FakeClock:
    """Milliseconds that only move when a test says so (lease expiry, backoff)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the whole session, on a free port, stopped by PID at the end."""
    server = start_redis(Path(tmp_path_factory.mktemp("redis")), appendonly=False)
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses, so tests never see each other's keys."""
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(redis_client: redis.Redis, prefix: str, clock: FakeClock) -> Queue:
    """A queue on the suite's Redis with its own prefix and a test-controlled clock."""
    return Queue(redis_client, "q", prefix=prefix, clock=clock)


# -- Django side ---------------------------------------------------------------------------


@pytest.fixture
def django_queue(settings: Any, redis_server: RedisServer, prefix: str) -> Queue:
    """Point Django (REDIS_URL, QUEUE_PREFIX) at the suite's Redis under this test's own prefix,
    and return the default queue as core.conf.get_queue() builds it (Redis server's clock)."""
    from core.conf import get_queue

    settings.REDIS_URL = redis_server.url
    settings.QUEUE_PREFIX = prefix
    return get_queue()


def keys_under(client: redis.Redis, prefix: str) -> list[str]:
    """Every key of one test's prefix (a test-only scan of the suite's own server)."""
    return sorted(client.scan_iter(match=f"{prefix}:*", count=1000))

"""The Redis server's own figures (core.queue.read.server) and what an error reply means
(core.queue.replies): the engine's, so that the console, /healthz and the benchmarks hold no
Redis client of their own."""

from __future__ import annotations

import socket

import pytest
import redis

from core.queue import RedisReplyError, RedisUnavailable, read, replies
from core.queue.base import translated
from core.queue.connect import connect


def test_ping_says_nothing_when_redis_answers(redis_client: redis.Redis) -> None:
    read.ping(redis_client)


def test_ping_of_a_redis_that_is_not_there_is_redis_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    client = connect(f"redis://127.0.0.1:{port}/0", cluster=False, socket_connect_timeout=1)
    with pytest.raises(RedisUnavailable):
        read.ping(client)


def test_health_reads_the_servers_version_uptime_and_fsync(redis_client: redis.Redis) -> None:
    health = read.redis_health(redis_client)
    info = redis_client.info("server")
    assert health.version == info["redis_version"]
    assert health.nodes == 1
    assert health.appendfsync in {"always", "everysec", "no"}
    assert health.uptime_ms == health.uptime_s * 1000 >= 0


def test_a_reply_that_refuses_one_command_is_no_outage(redis_client: redis.Redis,
                                                       prefix: str) -> None:
    redis_client.set(f"{prefix}:text", "x")
    with pytest.raises(RedisReplyError) as caught, translated("read"):
        redis_client.hget(f"{prefix}:text", "f")  # WRONGTYPE, from Redis itself
    assert "WRONGTYPE" in str(caught.value)
    assert not replies.passing(caught.value)


@pytest.mark.parametrize("reply", [
    redis.ResponseError("LOADING Redis is loading the dataset in memory"),
    redis.ResponseError("BUSY Redis is busy running a script"),
    redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
])
def test_a_reply_that_says_redis_cannot_serve_for_a_while_is_passing(
    reply: redis.ResponseError,
) -> None:
    error = RedisReplyError(f"read: Redis refused the operation ({reply})")
    error.__cause__ = reply
    assert replies.passing(error)
    assert replies.passing(RedisReplyError("no reply known"))  # assume the worst


def test_a_raw_clients_error_becomes_the_engines() -> None:
    down = replies.engine_error(redis.ConnectionError("Connection refused"))
    assert isinstance(down, RedisUnavailable)
    reply = redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind")
    refused = replies.engine_error(reply)
    assert isinstance(refused, RedisReplyError) and refused.__cause__ is reply
    assert not replies.passing(refused)
    other = ValueError("not Redis")
    assert replies.engine_error(other) is other


def test_command_stats_count_the_commands_sent(redis_client: redis.Redis, prefix: str) -> None:
    before = read.command_stats(redis_client)
    for _ in range(3):
        redis_client.hget(f"{prefix}:h", "f")
    after = read.command_stats(redis_client)
    calls, usec = after["hget"]
    assert calls - before.get("hget", (0, 0))[0] == 3 and usec >= 0


def test_cpu_seconds_grow(redis_client: redis.Redis) -> None:
    first = read.cpu_seconds(redis_client)
    assert 0 <= first <= read.cpu_seconds(redis_client)

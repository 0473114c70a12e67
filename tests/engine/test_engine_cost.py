"""What one-task requests cost Redis: commands and writes per request from submit to
completion (issue 6, items 15-16). Each command a Functions call sends costs Lua and Redis
time, and each write is also appended to the append-only file: these bounds keep the hot
paths from growing back. Counted on a redis-server of the test's own (INFO commandstats)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from core.queue import Queue, read
from core.stack.redis_server import RedisServer, start_redis

# Commands the engine sends that change data (and go to the append-only file when they do).
WRITES = frozenset({
    "xadd", "xgroup|create", "xgroup|setid", "xack", "xdel", "xclaim", "xreadgroup", "hset",
    "hdel", "hincrby", "zadd", "zrem", "zremrangebyscore", "zpopmax", "incrby", "del",
    "pexpire", "persist", "rpush", "publish",
})
N = 300


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = start_redis(tmp_path, appendonly=True, fsync="everysec")
    yield server
    server.stop()


def counts(client: redis.Redis) -> dict[str, int]:
    stats = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}


def per_request(before: dict[str, int], after: dict[str, int]) -> tuple[float, float]:
    """(commands sent by the engine's functions, writes among them) per request."""
    inner = {
        k: n - before.get(k, 0) for k, n in after.items()
        if k not in ("fcall", "info", "config|resetstat") and n - before.get(k, 0)
    }
    return sum(inner.values()) / N, sum(n for k, n in inner.items() if k in WRITES) / N


def test_one_task_requests_cost_few_commands_and_writes(own_server: RedisServer) -> None:
    client = redis.Redis.from_url(own_server.url, decode_responses=True)
    q = Queue(client, "cost")
    q.submit([0], handler="noop")  # the library loaded, the tenant slot made
    [first] = q.ack_and_dequeue("w", 1)[1]
    q.ack(first)
    start = counts(client)
    for i in range(N):
        q.submit([{"n": i}], handler="noop")
    submitted = counts(client)
    leases: list[str] = []
    done = 0
    while True:
        accepted, got, _ = q.ack_and_dequeue("w", 64, leases)
        done += sum(accepted)
        if not got:
            break
        leases = [lease.lease for lease in got]
    finished = counts(client)
    assert done == N and read.drained(q)
    assert read.stats(q).requests_by_state["done"] == N + 1

    submit_cmds, submit_writes = per_request(start, submitted)
    run_cmds, run_writes = per_request(submitted, finished)
    print(f"submit {submit_cmds} ({submit_writes} writes), run {run_cmds} ({run_writes} writes)")
    # Before: 18 commands (10 writes) a submit; 26 (21 writes) a lease, ack and completion.
    assert submit_cmds < 15.5, f"submit: {submit_cmds} commands a request"
    assert submit_writes < 10.5, f"submit: {submit_writes} writes a request"
    assert run_cmds <= 10, f"lease, ack, completion: {run_cmds} commands a request"
    assert run_writes <= 8, f"lease, ack, completion: {run_writes} writes a request"


def test_a_new_request_stores_no_zero_counter_and_reads_them_as_zero(queue: Queue) -> None:
    sub = queue.submit([1, 2], handler="noop", request_id="r")
    stored = queue.redis.hgetall(queue.keys.request("r"))
    assert not {"retry", "leased", "delayed", "done", "dead", "cancelled"} & set(stored)
    info = read.request(queue, sub.request_id)
    assert info is not None
    assert (info.total, info.waiting, info.leased, info.done, info.dead) == (2, 2, 0, 0, 0)
    [lease] = queue.dequeue("w", 1)
    queue.ack(lease)
    info = read.request(queue, "r")
    assert info is not None and (info.waiting, info.leased, info.done) == (1, 0, 1)


def test_a_waiting_one_task_request_takes_little_redis_memory(own_server: RedisServer) -> None:
    """Its stream's first node is allocated at stream-node-max-bytes (Redis 6.2+): 4 KB by
    default, 1 KB on the servers this project starts (core/stack/redis_server.py)."""
    client = redis.Redis.from_url(own_server.url, decode_responses=True)
    q = Queue(client, "mem")
    sub = q.submit([{"n": 1}], handler="noop")
    used = client.memory_usage(q.keys.request(sub.request_id)) + client.memory_usage(
        q.keys.tasks(sub.request_id)
    )
    assert used < 2_500, f"a waiting one-task request takes {used} bytes"


def test_a_result_costs_its_write_and_its_expiry_and_nothing_else(
    own_server: RedisServer,
) -> None:
    """Issue 20: a handler's result rides on its ack (one HSET, the request's field written
    with its counters) and takes the request's expiry at completion (one PEXPIRE)."""
    client = redis.Redis.from_url(own_server.url, decode_responses=True)
    # Without the handlers' metrics, whose minute hash takes a PEXPIRE when a field is new.
    q = Queue(client, "cost", metrics=False)

    def run(result: object) -> dict[str, int]:
        q.submit([0], handler="noop")  # the library loaded, the tenant slot made
        q.ack(q.ack_and_dequeue("w", 1)[1][0])
        for i in range(N):
            q.submit([{"n": i}], handler="echo")
        after_submit = counts(client)
        entries: list[str] = []
        while True:
            _, got, _ = q.ack_and_dequeue("w", 64, entries)
            if not got:
                break
            entries = [q.ack_entry(lease, result) for lease in got]
        finished = counts(client)
        assert read.drained(q)
        return {k: n - after_submit.get(k, 0) for k, n in finished.items()
                if k not in ("fcall", "info") and n - after_submit.get(k, 0)}

    plain = run(None)
    kept = run({"rows": 1})
    extra = {k: kept.get(k, 0) - plain.get(k, 0) for k in set(kept) | set(plain)}
    assert {k: v for k, v in extra.items() if v} == {"hset": N, "pexpire": N}

"""Submitting, streaming (open/add/seal) and the refusals that must leave Redis unchanged."""

from __future__ import annotations

import pytest
import redis

from core.queue import (
    InvalidInput,
    PayloadTooLarge,
    Queue,
    RequestSealed,
    UnknownRequest,
    introspect,
)


def keys_of(client: redis.Redis, prefix: str) -> list[str]:
    return sorted(client.scan_iter(match=f"{prefix}:*", count=1000))


def test_submit_creates_a_sealed_request_with_its_tasks_in_order(queue: Queue) -> None:
    sub = queue.submit([{"n": i} for i in range(5)], request_id="r1", concurrency=10)
    assert (sub.request_id, sub.created, sub.state, sub.total) == ("r1", True, "active", 5)
    leases = queue.dequeue("w1", 10)
    assert [lease.payload for lease in leases] == [{"n": i} for i in range(5)]
    assert {lease.request_id for lease in leases} == {"r1"}
    assert all(lease.attempt == 1 and lease.handler == "echo" for lease in leases)


def test_submit_generates_an_id_when_none_is_given(queue: Queue) -> None:
    a = queue.submit([1])
    b = queue.submit([1])
    assert a.request_id != b.request_id
    assert len(a.request_id) == 32


def test_submit_is_idempotent_on_request_id(queue: Queue, redis_client: redis.Redis) -> None:
    queue.submit([1, 2], request_id="same", priority=10)
    before = redis_client.hgetall(queue.keys.request("same"))
    again = queue.submit([1, 2, 3, 4], request_id="same", priority=90)
    assert (again.created, again.total) == (False, 2)
    assert redis_client.hgetall(queue.keys.request("same")) == before
    assert len(queue.dequeue("w", 10)) == 2


def test_all_keys_of_a_queue_share_its_hash_tag(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    queue.submit([1, 2], request_id="a")
    lease = queue.dequeue("w", 1)[0]
    queue.fail(lease, "boom", retry=False)
    found = keys_of(redis_client, prefix)
    assert found, "the queue wrote no keys"
    assert all(k.startswith(f"{prefix}:{{q}}:") for k in found), found


def test_streamed_request_runs_while_open_and_completes_only_when_sealed(queue: Queue) -> None:
    opened = queue.open(request_id="s", concurrency=10)
    assert (opened.state, opened.total) == ("open", 0)
    assert queue.add("s", [1, 2]) == 2
    first = queue.dequeue("w", 10)
    assert len(first) == 2
    queue.ack_many(first)
    assert queue.state("s") == "open"  # not sealed: more may come
    assert queue.add("s", [3]) == 3
    queue.ack_many(queue.dequeue("w", 10))
    assert queue.seal("s") == "done"
    assert queue.wait("s", timeout=0) == "done"


def test_sealing_with_work_left_keeps_it_running_and_sealing_twice_is_harmless(
    queue: Queue,
) -> None:
    queue.open(request_id="s")
    queue.add("s", [1])
    assert queue.seal("s") == "active"
    assert queue.seal("s") == "active"
    with pytest.raises(RequestSealed):
        queue.add("s", [2])


def test_add_and_seal_refuse_an_unknown_request(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    with pytest.raises(UnknownRequest):
        queue.add("nope", [1])
    with pytest.raises(UnknownRequest):
        queue.seal("nope")
    with pytest.raises(UnknownRequest):
        queue.state("nope")
    assert keys_of(redis_client, prefix) == []


@pytest.mark.parametrize(
    "bad", ["a:b", "a{b}", "{q}", "has space", "new\nline", "", "x" * 129, "/x", 7]
)
def test_ids_that_could_escape_a_key_name_are_refused(
    queue: Queue, redis_client: redis.Redis, prefix: str, bad: object
) -> None:
    for call in (
        lambda: queue.submit([1], request_id=bad),  # type: ignore[arg-type]
        lambda: queue.submit([1], tenant=bad),  # type: ignore[arg-type]
        lambda: queue.submit([1], handler=bad),  # type: ignore[arg-type]
        lambda: queue.add(bad, [1]),  # type: ignore[arg-type]
        lambda: queue.dequeue(bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidInput, match="invalid"):
            call()
    with pytest.raises(InvalidInput):
        Queue(redis_client, bad, prefix=prefix)  # type: ignore[arg-type]
    assert keys_of(redis_client, prefix) == []


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("priority", -1, "priority must be between 0 and 99"),
        ("priority", 100, "priority must be between 0 and 99"),
        ("priority", "5", "priority must be an integer"),
        ("priority", True, "priority must be an integer"),
        ("concurrency", 0, "concurrency must be at least 1"),
        ("max_attempts", 0, "max_attempts must be between 1 and 1000"),
        ("lease_ms", 5, "lease_ms must be at least 100"),
    ],
)
def test_out_of_range_options_are_refused_before_redis_is_touched(
    queue: Queue, redis_client: redis.Redis, prefix: str, option: str, value: object, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        queue.submit([1], **{option: value})
    assert keys_of(redis_client, prefix) == []


def test_oversize_and_unserialisable_payloads_are_refused_whole(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    small = Queue(redis_client, "q", prefix=prefix, max_payload_bytes=1000)
    with pytest.raises(PayloadTooLarge, match="task 1 payload is 1002 bytes; the limit is 1000"):
        small.submit(["ok", "x" * 1000])
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        queue.submit([{1, 2}])
    with pytest.raises(InvalidInput, match="at least one task"):
        queue.submit([])
    assert keys_of(redis_client, prefix) == []
    queue.open(request_id="o")
    with pytest.raises(PayloadTooLarge):
        small.add("o", ["x" * 2000])
    assert introspect.request(queue, "o").total == 0  # type: ignore[union-attr]


def test_multibyte_payloads_are_measured_in_bytes(redis_client: redis.Redis, prefix: str) -> None:
    q = Queue(redis_client, "q", prefix=prefix, max_payload_bytes=100)
    with pytest.raises(PayloadTooLarge):
        q.submit(["é" * 60])  # 60 characters, 122 bytes of JSON


def test_a_large_submit_is_split_into_batches_but_stays_one_request(queue: Queue) -> None:
    sub = queue.submit(list(range(25_000)), request_id="big", concurrency=100_000)
    assert (sub.created, sub.state, sub.total) == (True, "active", 25_000)
    info = introspect.request(queue, "big")
    assert info is not None and info.waiting == 25_000
    got = [lease for _ in range(26) for lease in queue.dequeue("w", 1000)]
    assert [lease.payload for lease in got] == list(range(25_000))


def test_redis_unreachable_is_a_queue_error_not_a_traceback_from_redis_py() -> None:
    from core.queue import RedisUnavailable
    from core.redis_server import free_port

    q = Queue.from_url(f"redis://127.0.0.1:{free_port()}/0", "q")
    with pytest.raises(RedisUnavailable, match="Redis is unreachable"):
        q.submit([1])


def test_a_client_that_returns_bytes_is_refused_with_a_clear_message(redis_server) -> None:  # type: ignore[no-untyped-def]
    raw = redis.Redis.from_url(redis_server.url)
    with pytest.raises(InvalidInput, match="decode_responses=True"):
        Queue(raw, "q")


def test_a_retried_large_submit_resumes_where_the_first_attempt_stopped(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.queue import RedisUnavailable
    from core.queue.produce import SUBMIT_BATCH

    tasks = list(range(SUBMIT_BATCH * 2 + 5))
    real_add = Queue._add
    calls = []

    def add_then_lose_the_connection(
        self: Queue, rid: str, payloads: list[bytes], **kw: object
    ) -> int:
        calls.append(len(payloads))
        if len(calls) == 2:
            raise RedisUnavailable("connection lost")
        return real_add(self, rid, payloads, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Queue, "_add", add_then_lose_the_connection)
    with pytest.raises(RedisUnavailable):
        queue.submit(tasks, request_id="big")
    assert queue.state("big") == "open"  # stopped part-way: 2 of 3 batches in
    monkeypatch.undo()
    again = queue.submit(tasks, request_id="big")
    assert (again.created, again.state, again.total) == (False, "active", len(tasks))
    got = [lease.payload for _ in range(21) for lease in queue.dequeue("w", 1000)]
    assert got == tasks  # every task once, in order
    assert queue.submit(tasks, request_id="big").total == len(tasks)  # and now plain idempotent


def test_a_resumed_add_appends_only_at_its_offset(queue: Queue) -> None:
    from core.queue.errors import TotalMismatch

    queue.open(request_id="o")
    queue.add("o", [1, 2])
    with pytest.raises(TotalMismatch):
        queue._add("o", [b"3"], expect=1)
    assert queue._add("o", [b"3"], expect=2) == 3

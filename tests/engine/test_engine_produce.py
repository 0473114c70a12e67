"""Submitting, streaming (open/add/seal) and the refusals that must leave Redis unchanged."""

from __future__ import annotations

import uuid
import warnings
from dataclasses import dataclass

import pytest
import redis

from core.queue import (
    InvalidInput,
    PayloadTooLarge,
    Queue,
    RequestSealed,
    UnknownRequest,
    handlers,
    read,
)
from core.queue.errors import InvalidPayload, UnknownHandlerWarning
from core.queue.models import HandlerOffer
from tests.conftest import FakeClock

# Requests to handlers no worker announced are the point of a few tests below, and beside
# the point everywhere else here.
pytestmark = pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning")


def keys_of(client: redis.Redis, prefix: str) -> list[str]:
    return sorted(client.scan_iter(match=f"{prefix}:*", count=1000))


def test_submit_creates_a_sealed_request_with_its_tasks_in_order(queue: Queue) -> None:
    sub = queue.submit(
        [{"n": i} for i in range(5)], request_id="r1", concurrency=10, handler="echo"
    )
    assert (sub.request_id, sub.created, sub.state, sub.total) == ("r1", True, "active", 5)
    leases = queue.dequeue("w1", 10)
    assert [lease.payload for lease in leases] == [{"n": i} for i in range(5)]
    assert {lease.request_id for lease in leases} == {"r1"}
    assert all(lease.attempt == 1 and lease.handler == "echo" for lease in leases)


def test_submit_generates_an_id_when_none_is_given(queue: Queue) -> None:
    a = queue.submit([1], handler="echo")
    b = queue.submit([1], handler="echo")
    assert a.request_id != b.request_id
    assert len(a.request_id) == 32


def test_submit_is_idempotent_on_request_id(queue: Queue, redis_client: redis.Redis) -> None:
    queue.submit([1, 2], request_id="same", priority=10, handler="echo")
    before = redis_client.hgetall(queue.keys.request("same"))
    again = queue.submit([1, 2, 3, 4], request_id="same", priority=90, handler="echo")
    assert (again.created, again.total) == (False, 2)
    assert redis_client.hgetall(queue.keys.request("same")) == before
    assert len(queue.dequeue("w", 10)) == 2


def test_all_keys_of_a_queue_share_its_hash_tag(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    queue.submit([1, 2], request_id="a", handler="echo")
    lease = queue.dequeue("w", 1)[0]
    queue.fail(lease, "boom", retry=False)
    found = keys_of(redis_client, prefix)
    assert found, "the queue wrote no keys"
    # Except the registry of queue names, one key per prefix (written alone, never by a script).
    found.remove(queue.keys.registry)
    assert all(k.startswith(f"{prefix}:{{q}}:") for k in found), found


def test_streamed_request_runs_while_open_and_completes_only_when_sealed(queue: Queue) -> None:
    opened = queue.open(request_id="s", concurrency=10, handler="echo")
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
    queue.open(request_id="s", handler="echo")
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
        lambda: queue.submit([1], request_id=bad, handler="echo"),  # type: ignore[arg-type]
        lambda: queue.submit([1], tenant=bad, handler="echo"),  # type: ignore[arg-type]
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
        ("concurrency", 0, "concurrency must be between 1 and 1000000"),
        ("max_attempts", 0, "max_attempts must be between 1 and 1000"),
        ("lease_ms", 5, "lease_ms must be between 100 and 86400000"),
    ],
)
def test_out_of_range_options_are_refused_before_redis_is_touched(
    queue: Queue, redis_client: redis.Redis, prefix: str, option: str, value: object, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        queue.submit([1], **{option: value}, handler="echo")
    assert keys_of(redis_client, prefix) == []


def test_oversize_and_unserialisable_payloads_are_refused_whole(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    small = Queue(redis_client, "q", prefix=prefix, max_payload_bytes=1000)
    with pytest.raises(PayloadTooLarge, match="task 1 payload is 1002 bytes; the limit is 1000"):
        small.submit(["ok", "x" * 1000], handler="echo")
    with pytest.raises(InvalidInput, match="not JSON-serialisable"):
        queue.submit([{1, 2}], handler="echo")
    with pytest.raises(InvalidInput, match="at least one task"):
        queue.submit([], handler="echo")
    assert keys_of(redis_client, prefix) == []
    queue.open(request_id="o", handler="echo")
    with pytest.raises(PayloadTooLarge):
        small.add("o", ["x" * 2000])
    assert read.request(queue, "o").total == 0  # type: ignore[union-attr]


def test_multibyte_payloads_are_measured_in_bytes(redis_client: redis.Redis, prefix: str) -> None:
    q = Queue(redis_client, "q", prefix=prefix, max_payload_bytes=100)
    with pytest.raises(PayloadTooLarge):
        q.submit(["é" * 60], handler="echo")  # 60 characters, 122 bytes of JSON


def test_a_large_submit_is_split_into_batches_but_stays_one_request(queue: Queue) -> None:
    sub = queue.submit(list(range(25_000)), request_id="big", concurrency=100_000, handler="echo")
    assert (sub.created, sub.state, sub.total) == (True, "active", 25_000)
    info = read.request(queue, "big")
    assert info is not None and info.waiting == 25_000
    got = [lease for _ in range(26) for lease in queue.dequeue("w", 1000)]
    assert [lease.payload for lease in got] == list(range(25_000))


def test_redis_unreachable_is_a_queue_error_not_a_traceback_from_redis_py() -> None:
    from core.queue import RedisUnavailable
    from core.stack.redis_server import free_port

    q = Queue.from_url(f"redis://127.0.0.1:{free_port()}/0", "q")
    with pytest.raises(RedisUnavailable, match="Redis is unreachable"):
        q.submit([1], handler="echo")


def test_a_client_that_returns_bytes_is_refused_with_a_clear_message(redis_server) -> None:  # type: ignore[no-untyped-def]
    raw = redis.Redis.from_url(redis_server.url)
    with pytest.raises(InvalidInput, match="decode_responses=True"):
        Queue(raw, "q")


def test_a_retried_large_submit_resumes_where_the_first_attempt_stopped(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.queue import RedisUnavailable
    from core.queue.options import SUBMIT_BATCH

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
        queue.submit(tasks, request_id="big", handler="echo")
    assert queue.state("big") == "open"  # stopped part-way: 2 of 3 batches in
    monkeypatch.undo()
    again = queue.submit(tasks, request_id="big", handler="echo")
    assert (again.created, again.state, again.total) == (False, "active", len(tasks))
    got = [lease.payload for _ in range(21) for lease in queue.dequeue("w", 1000)]
    assert got == tasks  # every task once, in order
    again = queue.submit(tasks, request_id="big", handler="echo")
    assert again.total == len(tasks)  # and now plain idempotent


def test_a_resumed_add_appends_only_at_its_offset(queue: Queue) -> None:
    from core.queue.errors import TotalMismatch

    queue.open(request_id="o", handler="echo")
    queue.add("o", [1, 2])
    with pytest.raises(TotalMismatch):
        queue._add("o", [b"3"], expect=1)
    assert queue._add("o", [b"3"], expect=2) == 3


# -- bad input is refused, not changed (issue 6, item 8) -----------------------------------


@pytest.mark.parametrize(
    ("tasks", "kind"),
    [("abc", "a str"), (b"abc", "a bytes"), ({"a": 1, "b": 2}, "a mapping"), (7, "int")],
)
def test_one_value_given_as_the_tasks_is_refused_not_split_into_tasks(
    queue: Queue, redis_client: redis.Redis, prefix: str, tasks: object, kind: str
) -> None:
    with pytest.raises(InvalidInput, match=f"tasks must be a list of task payloads, got {kind}"):
        queue.submit(tasks, handler="echo")  # type: ignore[arg-type]
    assert keys_of(redis_client, prefix) == []
    queue.open(request_id="o", handler="echo")
    with pytest.raises(InvalidInput, match="tasks must be a list"):
        queue.add("o", tasks)  # type: ignore[arg-type]
    assert read.request(queue, "o").total == 0  # type: ignore[union-attr]


def test_any_other_iterable_of_tasks_is_taken_in_order(queue: Queue) -> None:
    queue.submit((n * 2 for n in range(3)), request_id="g", handler="echo")
    queue.open(request_id="o", handler="echo")
    assert queue.add("o", range(2)) == 2
    assert [lease.payload for lease in queue.dequeue("w", 10)] == [0, 2, 4, 0, 1]


@dataclass
class Point:
    x: float
    y: float


@pytest.mark.parametrize(
    ("task", "where"),
    [
        (float("nan"), "payload"),
        ({"x": [1.5, float("inf")]}, r"payload\['x'\]\[1\]"),
        ([{"ok": None}, -float("inf")], r"payload\[1\]"),
        (Point(1.0, float("nan")), r"payload\['y'\]"),
    ],
)
def test_nan_and_infinity_are_refused_instead_of_arriving_as_null(
    queue: Queue, redis_client: redis.Redis, prefix: str, task: object, where: str
) -> None:
    with pytest.raises(InvalidPayload, match=rf"task 1 holds NaN or Infinity at {where}") as got:
        queue.submit([{"fine": 1.0}, task], handler="echo")
    assert got.value.index == 1
    assert keys_of(redis_client, prefix) == []
    queue.open(request_id="o", handler="echo")
    with pytest.raises(InvalidPayload, match="NaN or Infinity"):
        queue.add("o", [task])
    assert read.request(queue, "o").total == 0  # type: ignore[union-attr]


def test_null_itself_and_the_word_null_still_go_through(queue: Queue) -> None:
    tasks = [None, "null", {"v": None, "nullable": 1.5}, [None, 0.0]]
    queue.submit(tasks, request_id="r", handler="echo")
    assert [lease.payload for lease in queue.dequeue("w", 10)] == tasks


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("concurrency", 1_000_001, "concurrency must be between 1 and 1000000"),
        ("max_attempts", 1001, "max_attempts must be between 1 and 1000"),
        ("lease_ms", 86_400_001, "lease_ms must be between 100 and 86400000"),
        ("lease_ms", 10**16, "lease_ms must be between 100 and 86400000"),
        ("retention_ms", 10**16, "retention_ms must be between 1000 and 31536000000"),
        ("retention_ms", 999, "retention_ms must be between 1000"),
        ("backoff_ms", 10**16, "backoff_ms must be between 0 and 86400000"),
        ("backoff_ms", -1, "backoff_ms must be between 0 and 86400000"),
        ("backoff_max_ms", 10**16, "backoff_max_ms must be between 0 and 86400000"),
        ("retention_ms", 1e9, "retention_ms must be an integer"),
        ("seal", "no", "seal must be True or False"),
    ],
)
def test_options_beyond_their_bounds_are_refused_naming_the_option(
    queue: Queue, redis_client: redis.Redis, prefix: str, option: str, value: object, message: str
) -> None:
    with pytest.raises(InvalidInput, match=message):
        queue.submit([1], handler="echo", **{option: value})
    if option != "seal":
        with pytest.raises(InvalidInput, match=message):
            queue.open(handler="echo", **{option: value})
    assert keys_of(redis_client, prefix) == []


def test_the_largest_accepted_options_complete_a_request_with_its_event(
    queue: Queue, redis_client: redis.Redis
) -> None:
    from core.queue.options import MAX_BACKOFF_MS, MAX_LEASE_MS, MAX_RETENTION_MS

    queue.submit([1], request_id="r", handler="echo", lease_ms=MAX_LEASE_MS,
                 retention_ms=MAX_RETENTION_MS, backoff_ms=MAX_BACKOFF_MS,
                 backoff_max_ms=MAX_BACKOFF_MS, max_attempts=1000, concurrency=1_000_000)
    [lease] = queue.dequeue("w", 1)
    assert queue.fail(lease, "boom").delay_ms <= MAX_BACKOFF_MS
    queue.cancel("r")
    assert queue.state("r") == "cancelled"
    ttl = redis_client.pttl(queue.keys.request("r"))
    assert 0 < ttl <= MAX_RETENTION_MS
    events = redis_client.xrange(queue.keys.events)
    assert [f["type"] for _, f in events if f.get("request") == "r"][-1] == "completed"


def test_handler_is_required_by_submit_and_open(queue: Queue) -> None:
    with pytest.raises(TypeError, match="handler"):
        queue.submit([1])  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="handler"):
        queue.open(request_id="o")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="seal"):
        queue.open(request_id="o", handler="echo", seal=True)


def test_add_of_no_tasks_returns_the_real_total_and_still_checks_the_request(
    queue: Queue,
) -> None:
    queue.open(request_id="o", handler="echo")
    queue.add("o", [1, 2])
    assert queue.add("o", []) == 2
    with pytest.raises(UnknownRequest):
        queue.add("nope", [])
    queue.seal("o")
    with pytest.raises(RequestSealed):
        queue.add("o", [])


# -- handlers no worker announced (issue 6, item 9) ----------------------------------------


def submit_recording(q: Queue, *handlers_: str) -> list[warnings.WarningMessage]:
    """Submit one task per handler name with every warning recorded (none filtered)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for name in handlers_:
            q.submit([1], handler=name)
    return caught


def test_a_handler_no_worker_announced_warns_once_per_queue_and_handler(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    other = Queue(redis_client, "other", prefix=prefix)
    caught = submit_recording(queue, "resize", "resize", "thumb", "resize")
    caught += submit_recording(other, "resize")

    assert [w.category for w in caught] == [UnknownHandlerWarning] * 3
    messages = [str(w.message) for w in caught]
    assert "no worker of queue 'q' has announced handler 'resize'" in messages[0]
    assert "handler 'thumb'" in messages[1]
    assert "queue 'other'" in messages[2]
    assert all(w.filename == __file__ for w in caught)  # points at the caller's line
    assert read.stats(queue).requests_by_state["active"] == 4  # warned, still accepted


def test_the_warning_points_at_the_caller_of_open_too(queue: Queue) -> None:
    with pytest.warns(UnknownHandlerWarning, match="'resize'") as caught:
        queue.open(handler="resize")
    assert caught[0].filename == __file__


def test_an_announced_handler_does_not_warn_and_costs_one_read_per_process(
    queue: Queue, redis_client: redis.Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    handlers.announce(queue, "w1", ["resize", "thumb"])
    reads = []
    real = handlers.names
    monkeypatch.setattr(handlers, "names", lambda q: reads.append(q.name) or real(q))

    caught = submit_recording(queue, *["resize", "thumb"] * 10)
    # Queue objects are made per call (core.conf): what is known lives with the client.
    caught += submit_recording(Queue(redis_client, "q", prefix=prefix), "resize")

    assert caught == []
    assert reads == ["q"]


def test_a_handler_announced_later_is_seen_after_the_refresh(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.queue import produce

    assert len(submit_recording(queue, "resize")) == 1
    handlers.announce(queue, "w1", ["thumb"])
    monkeypatch.setattr(produce, "HANDLER_REFRESH_S", 0.0)
    assert submit_recording(queue, "thumb") == []


def test_a_failed_handler_check_does_not_fail_the_submit_it_follows(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.queue import RedisUnavailable

    def down(q: Queue) -> set[str]:
        raise RedisUnavailable("gone")

    monkeypatch.setattr(handlers, "names", down)
    caught = submit_recording(queue, "resize")
    assert caught == []
    assert queue.state(read.requests(queue, "active").items[0].id) == "active"


def test_an_announcement_lives_while_its_worker_beats_and_ends_with_it(
    queue: Queue, clock: FakeClock
) -> None:
    """Issue 33: an announcement ends with its worker's heartbeat, so a producer is not told
    a handler runs after the only worker that ran it is gone."""
    handlers.announce(queue, "w1", ["resize", "thumb"], live_ms=10_000)
    clock.advance(5000)
    handlers.announce(queue, "w2", ["thumb"], live_ms=10_000)
    handlers.announce(queue, "w3", [])
    assert handlers.known(queue) == {
        "resize": HandlerOffer("resize", clock.now + 5000, "w1"),
        "thumb": HandlerOffer("thumb", clock.now + 10_000, "w2"),
    }
    assert handlers.names(queue) == {"resize", "thumb"}

    clock.advance(6000)  # w1 never beat: its announcement lapsed
    assert handlers.names(queue) == {"thumb"}
    queue.heartbeat("w2", {}, lease_ms=10_000)  # a beat renews what w2 announced
    clock.advance(9000)
    assert handlers.names(queue) == {"thumb"}
    queue.unregister("w2")  # a worker that stops withdraws it at once
    assert handlers.known(queue) == {}

    handlers.announce(queue, "w4", ["a", "b"])
    handlers.announce(queue, "w4", ["b"])  # restarted without "a": withdrawn
    assert handlers.names(queue) == {"b"}
    with pytest.raises(InvalidInput, match="invalid handler name"):
        handlers.announce(queue, "w1", ["a:b"])
    with pytest.raises(InvalidInput, match="invalid worker name"):
        handlers.announce(queue, "~waiting", ["x"])


def test_a_request_without_an_id_gets_a_random_uuid4(queue: Queue) -> None:
    ids = {queue.submit([1], handler="noop").request_id for _ in range(50)}
    assert len(ids) == 50
    for rid in ids:
        parsed = uuid.UUID(rid)
        assert (parsed.hex, parsed.version, parsed.variant) == (rid, 4, uuid.RFC_4122)

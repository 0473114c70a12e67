"""Results (issue 20): a handler's return value is kept with its request, per task, written by
the ack that finishes the task (one Lua call), for as long as the request is kept."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis

from core.queue import (
    Completion,
    InvalidResult,
    LeaseLost,
    Queue,
    ResultTooLarge,
    UnknownRequest,
    read,
)
from core.worker import Registry, TaskContext, Worker, WorkerConfig
from tests.conftest import FakeClock

WEEK_MS = 7 * 86_400_000


def test_an_acked_tasks_result_is_kept_per_task_in_task_order(queue: Queue) -> None:
    queue.submit(["a", "b", "c", "d"], request_id="r", handler="echo")
    a, b, c, d = queue.dequeue("w", 4)
    queue.ack(d, {"rows": 4, "note": "spaces and \"quotes\" / slashes"})
    queue.ack(b, None)  # None: no result, nothing kept
    accepted, _, _ = queue.ack_and_dequeue(
        "w", 0, [queue.ack_entry(a, [1, "two", 3.5]), c.lease]  # c: a plain token
    )
    assert accepted == [True, True]
    assert queue.result("r") == {a.task_id: [1, "two", 3.5],
                                 d.task_id: {"rows": 4, "note": "spaces and \"quotes\" / slashes"}}
    assert list(queue.result("r")) == [a.task_id, d.task_id]  # the order the tasks were added
    assert queue.state("r") == "done"


def test_a_request_without_results_has_no_results_key(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2], request_id="r", handler="noop")
    queue.ack_many(queue.dequeue("w", 2))
    assert queue.result("r") == {}
    assert not redis_client.exists(queue.keys.results("r"))


def test_ack_many_takes_one_result_per_lease(queue: Queue) -> None:
    queue.submit([1, 2, 3], request_id="r", handler="echo")
    leases = queue.dequeue("w", 3)
    with pytest.raises(ValueError, match="3 leases but 2 results"):
        queue.ack_many(leases, ["x", "y"])
    assert queue.ack_many(leases, ["x", None, True]) == [True, True, True]
    assert list(queue.result("r").values()) == ["x", True]


def test_a_result_past_the_cap_is_refused_naming_its_size_and_the_cap(
    redis_client: redis.Redis, prefix: str, clock: FakeClock
) -> None:
    q = Queue(redis_client, "q", prefix=prefix, clock=clock, max_result_bytes=100)
    q.submit([1], request_id="r", handler="echo")
    (lease,) = q.dequeue("w", 1)
    q.ack_entry(lease, "x" * 98)  # 100 bytes as JSON, with its quotes: at the cap, kept
    with pytest.raises(ResultTooLarge) as caught:
        q.ack(lease, "x" * 99)
    assert caught.value.size == 101 and caught.value.limit == 100
    assert "101 bytes" in str(caught.value) and "the cap is 100 bytes" in str(caught.value)
    assert "own storage" in str(caught.value)
    assert q.state("r") == "active"  # nothing was sent: the task is still leased
    assert read.request(q, "r").leased == 1  # type: ignore[union-attr]


def test_the_default_cap_is_64_kib(queue: Queue) -> None:
    queue.submit([1], request_id="r", handler="echo")
    (lease,) = queue.dequeue("w", 1)
    with pytest.raises(ResultTooLarge, match="the cap is 65,536 bytes"):
        queue.ack_entry(lease, "x" * 65_535)
    queue.ack(lease, "x" * 65_534)
    assert len(queue.result("r")[lease.task_id]) == 65_534


@pytest.mark.parametrize(("value", "says"), [
    ({1, 2}, "not JSON-serialisable"),
    (object(), "not JSON-serialisable"),
    ({"ratio": float("nan")}, "NaN or Infinity at result['ratio']"),
    ([1, float("inf")], "NaN or Infinity at result[1]"),
])
def test_a_result_json_cannot_hold_is_refused(queue: Queue, value: Any, says: str) -> None:
    queue.submit([1], request_id="r", handler="echo")
    (lease,) = queue.dequeue("w", 1)
    with pytest.raises(InvalidResult, match=r".*".join(map(_escape, says.split()))):
        queue.ack(lease, value)
    assert queue.result("r") == {}


def _escape(text: str) -> str:
    import re

    return re.escape(text)


def test_a_refused_ack_keeps_nothing_and_the_redelivered_run_keeps_one_result(
    queue: Queue, clock: FakeClock, redis_client: redis.Redis
) -> None:
    queue.submit([1], request_id="r", handler="echo", lease_ms=1000)
    (first,) = queue.dequeue("w1", 1)
    clock.advance(1001)  # w1's lease runs out; the task is leased again to w2
    assert [r.outcome for r in queue.reap()] == ["waiting"]
    (second,) = queue.dequeue("w2", 1)
    assert second.task_id == first.task_id and second.lease != first.lease
    with pytest.raises(LeaseLost):
        queue.ack(first, "from the lost run")
    assert not redis_client.exists(queue.keys.results("r"))  # the refused ack kept nothing
    queue.ack(second, "from the run that counts")
    assert queue.result("r") == {first.task_id: "from the run that counts"}
    assert redis_client.hlen(queue.keys.results("r")) == 1


def test_a_late_ack_of_a_claimed_task_keeps_nothing_and_the_new_holders_result_replaces(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2], request_id="r", handler="echo")
    old, other = queue.dequeue("w1", 2)
    assert queue.claim("r", old.task_id, "w2") == "w1"
    # w1's run ends (its ack is refused and says so), then w2 runs the task.
    assert queue.ack_and_dequeue("w1", 0, [queue.ack_entry(old, "stale")])[0] == [False]
    assert queue.result("r") == {}
    (claimed,) = queue.leave_idle("w2")
    queue.ack(claimed, {"v": 1})
    # The key is the task, not the delivery: a second value for it replaces the first.
    redis_client.hset(queue.keys.results("r"), old.task_id, '"older"')
    queue.ack(other, "other")
    assert queue.result("r") == {old.task_id: "older", other.task_id: "other"}
    assert redis_client.hlen(queue.keys.results("r")) == 2


def test_results_expire_with_their_request(queue: Queue, redis_client: redis.Redis) -> None:
    queue.submit([1, 2], request_id="r", handler="echo", retention_ms=60_000)
    a, b = queue.dequeue("w", 2)
    queue.ack(a, "first")
    # Until the request completes, neither expires.
    assert redis_client.pttl(queue.keys.results("r")) == -1
    queue.ack(b)  # the completing ack carries no result: the kept one gets the expiry anyway
    assert queue.state("r") == "done"
    req_ttl = redis_client.pttl(queue.keys.request("r"))
    assert 0 < req_ttl <= 60_000
    assert abs(redis_client.pttl(queue.keys.results("r")) - req_ttl) < 50


def test_retention_deletes_the_results_with_the_request(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1], request_id="r", handler="echo", retention_ms=1000)
    queue.ack(queue.dequeue("w", 1)[0], "kept a second")
    assert queue.result("r")
    deadline = time.monotonic() + 5
    while redis_client.exists(queue.keys.request("r")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not redis_client.exists(queue.keys.request("r"), queue.keys.results("r"))
    with pytest.raises(UnknownRequest, match="retention ended"):
        queue.result("r")


def test_a_failed_requests_results_are_kept_its_week_and_a_requeue_keeps_them(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2], request_id="r", handler="echo", retention_ms=60_000, max_attempts=1)
    ok, bad = queue.dequeue("w", 2)
    queue.ack(ok, "done before the failure")
    queue.fail(bad, "boom")
    assert queue.state("r") == "failed"
    assert redis_client.pttl(queue.keys.results("r")) > WEEK_MS - 60_000
    assert queue.requeue_request("r") == 1  # reopened: nothing of it expires meanwhile
    assert redis_client.pttl(queue.keys.results("r")) == -1
    queue.ack(queue.dequeue("w", 1)[0], "after the requeue")
    assert queue.wait("r", timeout=0, results=True) == Completion(
        "done", {ok.task_id: "done before the failure", bad.task_id: "after the requeue"}
    )
    assert 0 < redis_client.pttl(queue.keys.results("r")) <= 60_000


def test_result_of_an_unknown_request_is_a_clear_error(queue: Queue) -> None:
    with pytest.raises(UnknownRequest, match="no request 'nope' in queue 'q'"):
        queue.result("nope")
    with pytest.raises(ValueError, match="invalid request id"):
        queue.result("a/b")


def test_a_cancelled_requests_finished_tasks_keep_their_results(queue: Queue) -> None:
    queue.submit([1, 2, 3], request_id="r", handler="echo")
    running = queue.dequeue("w", 1)[0]
    queue.cancel("r")
    queue.ack(running, "finished while cancelling")
    assert queue.wait("r", timeout=0, results=True) == Completion(
        "cancelled", {running.task_id: "finished while cancelling"}
    )


def test_wait_with_results_returns_them_with_the_completion(live_queue: Queue) -> None:
    live_queue.submit([1, 2], request_id="r", handler="echo")
    assert live_queue.wait("r", timeout=0.05, results=True) is None  # not finished yet
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(live_queue.wait("r", 10, results=True)))
    waiter.start()
    leases = live_queue.dequeue("w", 2)
    live_queue.ack_many(leases, [{"n": 1}, {"n": 2}])
    waiter.join(10)
    assert got == [Completion("done", {leases[0].task_id: {"n": 1}, leases[1].task_id: {"n": 2}})]
    assert live_queue.wait("r", timeout=0) == "done"  # without results: the state alone


def test_a_request_with_many_results_is_read_in_pages(queue: Queue) -> None:
    n = 2500
    queue.submit(list(range(n)), request_id="r", handler="echo")
    while leases := queue.dequeue("w", 1000):
        queue.ack_many(leases, [lease.payload * 2 for lease in leases])
    results = queue.result("r")
    assert len(results) == n
    assert list(results.values()) == [i * 2 for i in range(n)]  # task order, not hash order
    page = read.results(queue, "r", count=100)
    assert page.total == n and page.cursor != 0 and 0 < len(page.items) < n


def test_introspect_pages_results_and_reads_one_whole(queue: Queue) -> None:
    queue.submit([1, 2, 3], request_id="r", handler="echo")
    leases = queue.dequeue("w", 3)
    queue.ack_many(leases, ["one", None, {"three": 3}])
    page = read.results(queue, "r")
    assert page.total == 2 and page.cursor == 0
    assert page.items == [(leases[0].task_id, '"one"'), (leases[2].task_id, '{"three":3}')]
    assert read.result_text(queue, "r", leases[2].task_id) == '{"three":3}'
    assert read.result_text(queue, "r", leases[1].task_id) is None
    assert read.results(queue, "nope").total == 0


# -- the worker --------------------------------------------------------------------------


def _run_burst(queue: Queue, registry: Registry) -> Worker:
    worker = Worker([queue], WorkerConfig(name="w", burst=True, dead_after=1.0), registry)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(15)
    if thread.is_alive():
        worker.stop(hard=True)
        thread.join(10)
        pytest.fail("the burst worker did not finish")
    return worker


def test_a_worker_keeps_what_its_handler_returns(live_queue: Queue) -> None:
    registry = Registry()

    def square(payload: Any, ctx: TaskContext) -> Any:
        return None if payload == 0 else {"n": payload, "square": payload * payload}

    registry.register("square", square)
    live_queue.submit([0, 1, 2, 3], request_id="r", handler="square")
    _run_burst(live_queue, registry)
    state, results = live_queue.wait("r", timeout=5, results=True)  # type: ignore[misc]
    assert state == "done"
    assert list(results.values()) == [{"n": 1, "square": 1}, {"n": 2, "square": 4},
                                      {"n": 3, "square": 9}]


def test_a_worker_dead_letters_a_result_too_large_or_not_json_at_once(
    redis_client: redis.Redis, prefix: str
) -> None:
    q = Queue(redis_client, "q", prefix=prefix, max_result_bytes=1000)
    calls: list[Any] = []

    def produce(payload: Any, ctx: TaskContext) -> Any:
        calls.append(payload)
        return {"big": "x" * 2000, "small": "ok", "set": {1, 2}}[payload]

    registry = Registry()
    registry.register("produce", produce)
    q.submit(["big", "small", "set"], request_id="r", handler="produce", max_attempts=5,
             backoff_ms=10)
    _run_burst(q, registry)
    assert sorted(calls) == ["big", "set", "small"]  # each ran once: no retry loop
    assert q.wait("r", timeout=5) == "failed"
    letters = {d.payload: d for d in read.dead_letters(q)}
    assert set(letters) == {'"big"', '"set"'}
    assert letters['"big"'].error.startswith(
        "ResultTooLarge: the handler's result is 2,002 bytes as JSON; the cap is 1,000 bytes"
    )
    assert "not JSON-serialisable" in letters['"set"'].error
    assert letters['"set"'].error.startswith("InvalidResult: ")
    assert all(d.attempts == 1 for d in letters.values())
    assert list(q.result("r").values()) == ["ok"]

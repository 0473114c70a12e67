"""Completion, cancel, requeue, claim and the read-only views the console uses."""

from __future__ import annotations

import threading
import time

import pytest
import redis

from core.queue import (
    LeaseLost,
    NotLeased,
    Queue,
    RequestCancelled,
    RequestSealed,
    UnknownRequest,
    read,
)
from core.queue.scripts import SCRIPT_NAMES, source
from tests.conftest import FakeClock


def completions(redis_client: redis.Redis, queue: Queue, rid: str) -> list[str]:
    events = redis_client.xrange(queue.keys.events)
    return [f["state"] for _, f in events if f["type"] == "completed" and f["request"] == rid]


def test_completion_is_stored_then_announced_to_a_waiter(queue: Queue) -> None:
    queue.submit([1, 2], request_id="r", handler="echo")
    leases = queue.dequeue("w", 2)
    result: list[str | None] = []
    waiter = threading.Thread(target=lambda: result.append(queue.wait("r", timeout=10)))
    waiter.start()
    time.sleep(0.05)  # let the waiter subscribe; the test also passes if it has not yet
    started = time.monotonic()
    queue.ack_many(leases)
    waiter.join(5)
    assert result == ["done"]
    assert time.monotonic() - started < 1.0  # woken by the announcement, not by polling


def test_a_late_waiter_still_sees_the_completion(queue: Queue, redis_client: redis.Redis) -> None:
    queue.submit([1], request_id="r", handler="echo")
    queue.ack(queue.dequeue("w", 1)[0])
    assert queue.wait("r", timeout=0) == "done"
    assert completions(redis_client, queue, "r") == ["done"]
    with pytest.raises(UnknownRequest):
        queue.wait("never-submitted", timeout=0)


def test_wait_times_out_on_a_running_request(queue: Queue) -> None:
    queue.submit([1], request_id="r", handler="echo")
    assert queue.wait("r", timeout=0.05) is None


def test_cancel_drops_waiting_and_delayed_and_flags_running_tasks(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit(list(range(6)), request_id="r", concurrency=2, backoff_ms=60_000, handler="echo")
    a, b = queue.dequeue("w", 2)
    queue.fail(a, "transient")  # now delayed
    result = queue.cancel("r")
    assert (result.state, result.dropped, result.running) == ("cancelling", 5, 1)
    assert queue.dequeue("w", 10) == []
    assert queue.extend([b]) == [2]  # the worker learns its task's request is cancelled
    assert queue.release([b]) == [2]
    assert queue.wait("r", timeout=0) == "cancelled"
    info = read.request(queue, "r")
    assert info is not None and (info.cancelled, info.waiting, info.delayed, info.leased) == (
        6,
        0,
        0,
        0,
    )
    assert redis_client.zcard(queue.keys.delayed) == 0
    assert read.stats(queue).waiting == 0
    assert completions(redis_client, queue, "r") == ["cancelled"]


def test_a_running_task_of_a_cancelled_request_may_still_finish(queue: Queue) -> None:
    queue.submit([1, 2], request_id="r", concurrency=1, handler="echo")
    lease = queue.dequeue("w", 1)[0]
    queue.cancel("r")
    queue.ack(lease)
    info = read.request(queue, "r")
    assert info is not None and (info.state, info.done, info.cancelled) == ("cancelled", 1, 1)


def test_cancel_is_idempotent_and_closes_an_open_request(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.open(request_id="o", handler="echo")
    queue.add("o", [1])
    assert queue.cancel("o").state == "cancelled"
    assert queue.cancel("o").state == "cancelled"
    with pytest.raises(RequestSealed):
        queue.add("o", [2])
    with pytest.raises(UnknownRequest):
        queue.cancel("missing")
    assert completions(redis_client, queue, "o") == ["cancelled"]


def test_requeue_by_dead_letter_id_reopens_a_failed_request(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2], request_id="r", max_attempts=1, handler="echo")
    for lease in queue.dequeue("w", 2):
        queue.fail(lease, "boom")
    assert queue.state("r") == "failed"
    letters = read.dead_letters(queue)
    assert queue.requeue([letters[0].id]) == (1, 0)
    assert queue.requeue([letters[0].id]) == (0, 1)  # already requeued
    assert queue.state("r") == "active"
    lease = queue.dequeue("w", 1)[0]
    assert lease.attempt == 1 and lease.task_id == letters[0].task_id  # same task, attempts reset
    queue.ack(lease)
    assert queue.state("r") == "failed"  # the other task is still dead
    assert queue.requeue_request("r") == 1
    queue.ack(queue.dequeue("w", 1)[0])
    assert queue.wait("r", timeout=0) == "done"
    assert completions(redis_client, queue, "r") == ["failed", "failed", "done"]
    assert read.dead_letters(queue) == []
    # The queue's totals count what happened, requeues or not: two failures, then two done
    # (the Overview's "failed per minute" and /metrics' counters read them).
    totals = read.stats(queue).totals
    assert (totals["failed"], totals["done"], totals["submitted"]) == (2, 2, 2)


def test_requeue_refuses_cancelled_and_unknown_requests(queue: Queue) -> None:
    queue.submit([1, 2], request_id="r", max_attempts=1, concurrency=1, handler="echo")
    queue.fail(queue.dequeue("w", 1)[0], "boom")
    queue.cancel("r")
    with pytest.raises(RequestCancelled):
        queue.requeue_request("r")
    assert queue.requeue([read.dead_letters(queue)[0].id]) == (0, 1)
    with pytest.raises(UnknownRequest):
        queue.requeue_request("missing")


def test_claim_voids_the_old_lease_and_moves_the_task_once_its_old_run_is_over(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([{"k": 1}], request_id="r", max_attempts=1, handler="echo")
    old = queue.dequeue("stuck", 1)[0]
    assert queue.claim("r", old.task_id, "rescuer") == "stuck"
    [entry] = read.pending(queue, "r")
    assert (entry.consumer, entry.lease_expires_ms, entry.moves_by_ms) == (
        "stuck", None, clock.now + old.lease_ms)
    assert queue.leave_idle("rescuer") == []  # not while the old run may still go on
    with pytest.raises(LeaseLost):
        queue.ack(old)  # refused; it also says the old run is over
    [new] = queue.leave_idle("rescuer")  # handed to the rescuer
    assert (new.payload, new.attempt, new.task_id) == ({"k": 1}, 1, old.task_id)
    [entry] = read.pending(queue, "r")
    assert entry.consumer == "rescuer" and entry.lease_expires_ms == clock.now + new.lease_ms
    assert entry.moves_by_ms is None
    queue.ack(new)
    assert queue.state("r") == "done"


def test_release_task_puts_a_leased_task_back_and_refuses_one_not_leased(queue: Queue) -> None:
    queue.submit([1, 2], request_id="r", concurrency=1, handler="echo")
    lease = queue.dequeue("w", 1)[0]
    assert queue.release_task("r", lease.task_id) == "w"
    with pytest.raises(NotLeased):
        queue.release_task("r", lease.task_id)
    with pytest.raises(LeaseLost):
        queue.ack(lease)
    assert queue.dequeue("w2", 1)[0].task_id == lease.task_id  # released goes first


def test_stats_requests_and_pending_views(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1, 2, 3], request_id="a", priority=70, concurrency=1, handler="echo")
    clock.advance(1)
    queue.submit([1], request_id="b", priority=20, max_attempts=1, handler="echo")
    clock.advance(1)
    queue.open(request_id="c", handler="echo")
    lease_a = queue.dequeue("w", 1)[0]
    queue.fail(queue.dequeue("w", 1)[0], "boom")
    stats = read.stats(queue)
    assert stats.waiting_by_priority == {70: 2}
    assert (stats.waiting, stats.leased, stats.delayed, stats.dead) == (2, 1, 0, 1)
    assert stats.requests_by_state == {
        "open": 1,
        "scheduled": 0,
        "held": 0,
        "active": 1,
        "cancelling": 0,
        "done": 0,
        "failed": 1,
        "cancelled": 0,
    }
    page, cursor = read.requests(queue, "active", limit=1)
    assert [r.id for r in page] == ["a"] and cursor is None
    assert [r.waiting for r in page] == [2]
    [entry] = read.pending(queue, "a")
    assert (entry.task_id, entry.consumer, entry.deliveries) == (lease_a.task_id, "w", 1)
    assert [e.consumer for e in read.pending(queue, "b")] == ["~dead"]
    assert read.request(queue, "zzz") is None
    with pytest.raises(ValueError, match="unknown state"):
        read.requests(queue, "bogus")


def test_requests_are_paged_newest_first(queue: Queue, clock: FakeClock) -> None:
    for i in range(5):
        clock.advance(10)
        queue.submit([1], request_id=f"r{i}", handler="echo")
    seen, cursor = [], None
    while True:
        page, cursor = read.requests(queue, "active", after=cursor, limit=2)
        seen += [r.id for r in page]
        if cursor is None:
            break
    assert seen == ["r4", "r3", "r2", "r1", "r0"]


def test_heartbeat_registers_the_worker_and_renews_its_leases(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1], request_id="r", lease_ms=1000, handler="echo")
    lease = queue.dequeue("w1", 1)[0]
    clock.advance(900)
    assert queue.heartbeat("w1", {"host": "h", "pid": 42}, [lease]) == [1]
    clock.advance(900)
    assert queue.reap() == []
    [worker] = read.workers(queue).items
    assert (worker.name, worker.last_beat_ms, worker.info) == (
        "w1",
        clock.now - 900,
        {"host": "h", "pid": 42},
    )
    assert read.stats(queue).workers == 1
    queue.unregister("w1")
    assert read.workers(queue).items == []


def test_every_script_documents_its_contract() -> None:
    for name in SCRIPT_NAMES:
        text = source(name)
        assert text.lstrip().startswith(f"--[[ {name}:"), name
        header = text.split("--]]")[0]
        assert "KEYS[1..8]" in header and "ARGV[1]" in header and "Returns" in header, name
        assert "--@include" not in text  # includes go to the top of the library

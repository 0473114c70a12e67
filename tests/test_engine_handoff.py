"""Handoff: work arriving while a worker idles is leased to it at once and pushed to its
handoff list, saving the wake-up and dequeue round trips; never at the cost of priority."""

from __future__ import annotations

import redis

from core.queue import Queue, introspect
from core.queue.client import wait_for_any
from tests.conftest import FakeClock


def go_idle(queue: Queue, consumer: str, lease_ms: int = 5000) -> None:
    _, leases, _ = queue.ack_and_dequeue(consumer, 8, lease_ms=lease_ms, idle_handoff=True)
    assert leases == []


def test_an_idle_worker_is_handed_new_work_directly(queue: Queue, clock: FakeClock) -> None:
    go_idle(queue, "w1", lease_ms=5000)
    queue.submit([{"n": 1}], request_id="r")
    woken = wait_for_any([queue], 1.0, consumer="w1")
    assert woken is not None
    q, [lease] = woken
    assert q is queue and lease.payload == {"n": 1} and lease.attempt == 1
    [entry] = introspect.pending(queue, "r")
    assert entry.consumer == "w1" and entry.lease_expires_ms == clock.now + 5000
    assert introspect.request(queue, "r").leased == 1  # type: ignore[union-attr]
    queue.ack(lease)
    assert queue.state("r") == "done"


def test_a_plain_dequeue_does_not_register_for_handoff(
    queue: Queue, redis_client: redis.Redis
) -> None:
    assert queue.dequeue("w1", 4) == []
    queue.submit([1], request_id="r")
    assert redis_client.llen(queue.keys.handoff("w1")) == 0
    assert [lease.payload for lease in queue.dequeue("w2", 1)] == [1]


def test_handoff_takes_the_highest_priority_work_first(queue: Queue) -> None:
    for i in range(17):
        go_idle(queue, f"w{i}")
    queue.submit(["high"] * 20, request_id="high", priority=90)  # 16 handed over, 4 wait
    queue.submit(["low"], request_id="low", priority=10)  # the 17th gets high, not low
    handed = [lease.payload for i in range(17) for lease in queue.leave_idle(f"w{i}", 5000)]
    assert handed == ["high"] * 17
    assert [lease.payload for lease in queue.dequeue("x", 5)] == ["high"] * 3 + ["low"]


def test_work_made_eligible_together_is_handed_over_by_priority(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1], request_id="a-low", priority=10, lease_ms=100)
    queue.submit([1], request_id="b-high", priority=90, lease_ms=100)
    assert len(queue.dequeue("w1", 2)) == 2
    go_idle(queue, "w2", lease_ms=0)
    clock.advance(101)
    queue.reap()  # both leases expire in one call, the low one first
    assert [lease.request_id for lease in queue.leave_idle("w2")] == ["b-high"]


def test_a_stale_idle_registration_is_not_trusted(queue: Queue, clock: FakeClock) -> None:
    go_idle(queue, "gone")
    clock.advance(1501)  # it did not come back to renew its registration: maybe dead
    queue.submit([1], request_id="r")
    assert queue.leave_idle("gone", 5000) == []
    assert len(queue.dequeue("alive", 1)) == 1


def test_the_concurrency_limit_holds_for_handoffs(queue: Queue) -> None:
    for i in range(3):
        go_idle(queue, f"w{i}")
    queue.submit(list(range(5)), request_id="r", concurrency=2)
    handed = [lease for i in range(3) for lease in queue.leave_idle(f"w{i}", 5000)]
    assert len(handed) == 2
    info = introspect.request(queue, "r")
    assert info is not None and (info.leased, info.waiting) == (2, 3)


def test_leaving_idle_returns_what_was_handed_over_for_release(queue: Queue) -> None:
    go_idle(queue, "w1")
    queue.submit([1], request_id="r", max_attempts=1)
    [lease] = queue.leave_idle("w1", 5000)
    assert queue.release([lease]) == [1]
    queue.submit([2], request_id="s")  # no longer idle: nothing is handed over
    assert queue.leave_idle("w1", 5000) == []
    again = queue.dequeue("w2", 2)
    assert sorted(lease.payload for lease in again) == [1, 2]
    assert all(lease.attempt == 1 for lease in again)  # the release cost no attempt


def test_retries_promoted_by_a_dequeue_go_to_it_first_then_to_idle_workers(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1, 2], request_id="r", backoff_ms=1000, backoff_max_ms=1000)
    delays = [queue.fail(lease, "flaky").delay_ms for lease in queue.dequeue("w1", 2)]
    go_idle(queue, "w2")
    clock.advance(max(delays))
    [mine] = queue.dequeue("w3", 1)  # its call promoted both retries and took one
    [handed] = queue.leave_idle("w2", 5000)  # the other went to the idle worker
    assert {mine.task_id, handed.task_id} == {lease.task_id for lease in [mine, handed]}
    assert (mine.attempt, handed.attempt) == (2, 2)

"""Handoff: work arriving while a worker idles is leased to it at once and pushed to its
handoff list, saving the wake-up and dequeue round trips; never at the cost of priority."""

from __future__ import annotations

import threading
from typing import Any

import redis

from core.queue import Queue, read
from core.queue.client import wait_for_any
from tests.conftest import FakeClock


def go_idle(queue: Queue, consumer: str, lease_ms: int = 5000) -> None:
    _, leases, _ = queue.ack_and_dequeue(consumer, 8, lease_ms=lease_ms, idle_handoff=True)
    assert leases == []


def test_an_idle_worker_is_handed_new_work_directly(queue: Queue, clock: FakeClock) -> None:
    go_idle(queue, "w1", lease_ms=5000)
    queue.submit([{"n": 1}], request_id="r", handler="echo")
    woken = wait_for_any([queue], 1.0, consumer="w1")
    assert woken is not None
    q, [lease] = woken
    assert q is queue and lease.payload == {"n": 1} and lease.attempt == 1
    [entry] = read.pending(queue, "r")
    assert entry.consumer == "w1" and entry.lease_expires_ms == clock.now + 5000
    assert read.request(queue, "r").leased == 1  # type: ignore[union-attr]
    queue.ack(lease)
    assert queue.state("r") == "done"


def test_a_plain_dequeue_does_not_register_for_handoff(
    queue: Queue, redis_client: redis.Redis
) -> None:
    assert queue.dequeue("w1", 4) == []
    queue.submit([1], request_id="r", handler="echo")
    assert redis_client.llen(queue.keys.handoff("w1")) == 0
    assert [lease.payload for lease in queue.dequeue("w2", 1)] == [1]


def test_handoff_takes_the_highest_priority_work_first(queue: Queue) -> None:
    for i in range(17):
        go_idle(queue, f"w{i}")
    # 16 handed over, 4 wait; the 17th gets high, not low
    queue.submit(["high"] * 20, request_id="high", priority=90, handler="echo")
    queue.submit(["low"], request_id="low", priority=10, handler="echo")
    handed = [lease.payload for i in range(17) for lease in queue.leave_idle(f"w{i}", 5000)]
    assert handed == ["high"] * 17
    assert [lease.payload for lease in queue.dequeue("x", 5)] == ["high"] * 3 + ["low"]


def test_work_made_eligible_together_is_handed_over_by_priority(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1], request_id="a-low", priority=10, lease_ms=100, handler="echo")
    queue.submit([1], request_id="b-high", priority=90, lease_ms=100, handler="echo")
    assert len(queue.dequeue("w1", 2)) == 2
    go_idle(queue, "w2", lease_ms=0)
    clock.advance(101)
    queue.reap()  # both leases expire in one call, the low one first
    assert [lease.request_id for lease in queue.leave_idle("w2")] == ["b-high"]


def test_a_stale_idle_registration_is_not_trusted(queue: Queue, clock: FakeClock) -> None:
    go_idle(queue, "gone")
    clock.advance(1501)  # it did not come back to renew its registration: maybe dead
    queue.submit([1], request_id="r", handler="echo")
    assert queue.leave_idle("gone", 5000) == []
    assert len(queue.dequeue("alive", 1)) == 1


def test_the_concurrency_limit_holds_for_handoffs(queue: Queue) -> None:
    for i in range(3):
        go_idle(queue, f"w{i}")
    queue.submit(list(range(5)), request_id="r", concurrency=2, handler="echo")
    handed = [lease for i in range(3) for lease in queue.leave_idle(f"w{i}", 5000)]
    assert len(handed) == 2
    info = read.request(queue, "r")
    assert info is not None and (info.leased, info.waiting) == (2, 3)


def test_leaving_idle_returns_what_was_handed_over_for_release(queue: Queue) -> None:
    go_idle(queue, "w1")
    queue.submit([1], request_id="r", max_attempts=1, handler="echo")
    [lease] = queue.leave_idle("w1", 5000)
    assert queue.release([lease]) == [1]
    queue.submit([2], request_id="s", handler="echo")  # no longer idle: nothing is handed over
    assert queue.leave_idle("w1", 5000) == []
    again = queue.dequeue("w2", 2)
    assert sorted(lease.payload for lease in again) == [1, 2]
    assert all(lease.attempt == 1 for lease in again)  # the release cost no attempt


def test_retries_promoted_by_a_dequeue_go_to_it_first_then_to_idle_workers(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1, 2], request_id="r", backoff_ms=1000, backoff_max_ms=1000, handler="echo")
    delays = [queue.fail(lease, "flaky").delay_ms for lease in queue.dequeue("w1", 2)]
    go_idle(queue, "w2")
    clock.advance(max(delays))
    [mine] = queue.dequeue("w3", 1)  # its call promoted both retries and took one
    [handed] = queue.leave_idle("w2", 5000)  # the other went to the idle worker
    assert {mine.task_id, handed.task_id} == {lease.task_id for lease in [mine, handed]}
    assert (mine.attempt, handed.attempt) == (2, 2)


# -- issue 6: handoff beside a wake-up token, due retries by priority -------------------


def test_an_idle_worker_blocked_on_both_lists_gets_its_handed_task_not_a_token(
    queue: Queue, redis_client: redis.Redis, wait_until: Any
) -> None:
    """Was: the script pushed a wake-up token before handing the task over, so the blocked
    worker's BLPOP returned the token; it dequeued a second task of the request and left the
    handed one on its list, unrenewed, until it was reaped and later run twice."""
    go_idle(queue, "w1")
    woken: list[Any] = []
    blocked = threading.Thread(target=lambda: woken.append(wait_for_any([queue], 5.0, "w1")))
    blocked.start()
    wait_until(lambda: any(c.get("cmd") == "blpop" for c in redis_client.client_list()),
               what="the worker to block")
    # work is left over
    queue.submit([{"seconds": 12}] * 4, request_id="r", concurrency=2, handler="echo")
    blocked.join(5)
    assert woken and woken[0] is not None and len(woken[0][1]) == 1, woken
    assert redis_client.llen(queue.keys.wake) == 1  # the rest is for another worker


def test_a_handed_task_left_on_the_list_comes_back_with_the_next_dequeue_renewed(
    queue: Queue, redis_client: redis.Redis, clock: FakeClock
) -> None:
    go_idle(queue, "w1", lease_ms=2000)
    queue.submit([1, 2], request_id="r", concurrency=1, handler="echo")
    assert redis_client.llen(queue.keys.handoff("w1")) == 1
    clock.advance(1500)
    # The worker was woken by something else and dequeues: its handed task comes first,
    # renewed from now, and no second task of this concurrency-1 request is leased.
    _, leases, _ = queue.ack_and_dequeue("w1", 4, lease_ms=2000, idle_handoff=True)
    assert [x.payload for x in leases] == [1]
    assert redis_client.llen(queue.keys.handoff("w1")) == 0
    [entry] = read.pending(queue, "r")
    assert entry.lease_expires_ms == clock.now + 2000
    clock.advance(1999)
    assert queue.reap() == []
    queue.ack(leases[0])


def test_a_handed_task_reaped_before_pickup_is_not_delivered(
    queue: Queue, redis_client: redis.Redis, clock: FakeClock
) -> None:
    go_idle(queue, "w1", lease_ms=1000)
    queue.submit([1], request_id="r", concurrency=1, handler="echo")
    clock.advance(1001)
    assert [r.outcome for r in queue.reap()] == ["waiting"]
    _, leases, _ = queue.ack_and_dequeue("w1", 1, lease_ms=1000, idle_handoff=True)
    assert [x.attempt for x in leases] == [2]  # the redelivery, not the reaped lease


def test_many_due_low_priority_retries_never_pass_over_a_due_high_one(
    queue: Queue, clock: FakeClock
) -> None:
    """Was: 100 due retries promoted per call, earliest first, whatever their priority."""
    queue.submit(list(range(150)), request_id="low", priority=10, backoff_ms=100,
                 backoff_max_ms=100, handler="echo")
    for lease in queue.dequeue("w", 150):
        queue.fail(lease, "flaky")
    clock.advance(60)
    queue.submit(["hi"], request_id="high", priority=90, backoff_ms=100, backoff_max_ms=100,
                 handler="echo")
    [hi] = queue.dequeue("w", 1)
    assert hi.request_id == "high"
    queue.fail(hi, "flaky")
    clock.advance(200)  # all due; the high one last
    order = [x.request_id for x in queue.dequeue("w", 1)]
    assert order == ["high"]


def test_promotion_stops_at_a_priority_with_more_due_than_one_call_promotes(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit(list(range(130)), request_id="mid", priority=50, backoff_ms=10,
                 backoff_max_ms=10, handler="echo")
    for lease in queue.dequeue("w", 130):
        queue.fail(lease, "flaky")
    queue.submit(["low"], request_id="low", priority=10, handler="echo")
    clock.advance(20)
    got = queue.dequeue("w", 200)
    # 100 of "mid" promoted; "low" must wait while 30 due "mid" retries are not yet promoted.
    assert {x.request_id for x in got} == {"mid"}
    got += queue.dequeue("w", 200)
    assert [x.request_id for x in got].count("mid") == 130
    assert got[-1].request_id == "low"


def test_the_idle_handoff_promotes_due_retries_first(queue: Queue, clock: FakeClock) -> None:
    """Was: a handoff never promoted due retries, so new low-priority work went to the idle
    worker while a high-priority retry was due."""
    queue.submit(["hi"], request_id="high", priority=90, backoff_ms=100, backoff_max_ms=100,
                 handler="echo")
    queue.fail(queue.dequeue("w", 1)[0], "flaky")
    go_idle(queue, "w1")
    clock.advance(200)  # the retry is due; w1's registration is still fresh
    queue.submit(["low"], request_id="low", priority=10, handler="echo")
    assert [x.request_id for x in queue.leave_idle("w1", 5000)] == ["high"]
    assert [x.request_id for x in queue.dequeue("w2", 2)] == ["low"]

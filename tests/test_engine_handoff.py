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


def test_handoff_respects_priority_when_work_is_already_waiting(queue: Queue) -> None:
    for i in range(17):
        go_idle(queue, f"w{i}")
    queue.submit(["high"] * 20, request_id="high", priority=90)  # 16 handed over, 4 wait
    queue.submit(["low"], request_id="low", priority=10)
    handed = [lease.payload for i in range(17) for lease in queue.leave_idle(f"w{i}", 5000)]
    assert handed == ["high"] * 16  # the 17th idle worker was not handed the low task
    assert [lease.payload for lease in queue.dequeue("x", 5)] == ["high"] * 4 + ["low"]


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


def test_a_retry_whose_backoff_ends_is_handed_to_an_idle_worker(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1], request_id="r", backoff_ms=1000, backoff_max_ms=1000)
    out = queue.fail(queue.dequeue("w1", 1)[0], "flaky")
    go_idle(queue, "w2")
    clock.advance(out.delay_ms)
    assert queue.dequeue("w3", 1) == []  # its call promoted the retry; the idle w2 got it
    [lease] = queue.leave_idle("w2", 5000)
    assert (lease.request_id, lease.attempt) == ("r", 2)

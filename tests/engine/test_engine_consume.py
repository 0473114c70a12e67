"""Leasing, acking, failing, extending, releasing and reaping: the consumer's side."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from core.queue import InvalidInput, LeaseLost, Queue, read
from tests.conftest import FakeClock


def test_priority_is_strict_between_levels(queue: Queue) -> None:
    queue.submit(["low"] * 3, request_id="low", priority=10, handler="echo")
    queue.submit(["high"] * 3, request_id="high", priority=90, handler="echo")
    queue.submit(["mid"] * 3, request_id="mid", priority=50, handler="echo")
    order = [lease.payload for lease in queue.dequeue("w", 9)]
    assert order == ["high"] * 3 + ["mid"] * 3 + ["low"] * 3


def test_priority_stays_strict_after_the_queue_sequence_passes_a_band(queue: Queue) -> None:
    """A slot's place in `ready` was band(prio) + the queue's sequence, which every request
    and rotation advances: past 1e12 (~230 days at 50,000 a second) a slot landed in the
    next lower priority's band and was served after it."""
    queue.submit(["mid"], request_id="mid", priority=89, handler="echo")
    queue.redis.set(queue.keys.base + "seq", 2 * 10**12)  # a queue that has lived long
    queue.submit(["high"], request_id="high", priority=90, handler="echo")
    assert [lease.payload for lease in queue.dequeue("w", 2)] == ["high", "mid"]


def test_a_band_near_its_width_is_renumbered_in_its_order(queue: Queue) -> None:
    for tenant in ("a", "b", "c"):
        queue.submit([tenant] * 3, request_id=tenant, tenant=tenant, handler="echo")
    ready = queue.keys.base + "ready"
    band = 49 * 10**12  # priority 50
    near = band + 10**12 // 2 - 1  # the band's last offset about to pass half its width
    for i, slot in enumerate(queue.redis.zrange(ready, 0, -1)):
        queue.redis.zadd(ready, {slot: near - 2 + i})
    order = [queue.dequeue("w", 1)[0].payload for _ in range(6)]
    assert order == ["a", "b", "c", "a", "b", "c"]  # the rotation went on in turn
    scores = [score for _, score in queue.redis.zrange(ready, 0, -1, withscores=True)]
    # The second rotation's offset passed half the band's width: the band became 1, 2, 3,
    # the rotated slot 4; each of the four rotations after took one more.
    assert scores == [band + 6, band + 7, band + 8]


def test_concurrency_limit_holds_until_a_slot_frees(queue: Queue) -> None:
    queue.submit(list(range(10)), request_id="r", concurrency=2, handler="echo")
    first = queue.dequeue("w1", 10)
    assert len(first) == 2
    assert queue.dequeue("w2", 10) == []
    queue.ack(first[0])
    assert [lease.payload for lease in queue.dequeue("w2", 10)] == [2]


def test_a_full_request_lets_lower_priority_work_through(queue: Queue) -> None:
    queue.submit(["high"] * 5, request_id="high", priority=90, concurrency=1, handler="echo")
    queue.submit(["low"] * 5, request_id="low", priority=10, handler="echo")
    assert [lease.payload for lease in queue.dequeue("w", 3)] == ["high", "low", "low"]


def test_tenants_share_a_priority_level_in_turn(queue: Queue) -> None:
    for i in range(5):
        queue.submit(["a"] * 4, request_id=f"a{i}", tenant="big", handler="echo")
    queue.submit(["b"] * 4, request_id="b0", tenant="small", handler="echo")
    got = [queue.dequeue("w", 1)[0] for _ in range(8)]
    assert [lease.payload for lease in got].count("b") == 4
    big = [lease.request_id for lease in got if lease.payload == "a"]
    assert big == ["a0", "a1", "a2", "a3"]  # requests of one tenant rotate as well


def test_ack_is_accepted_once(queue: Queue) -> None:
    queue.submit([1, 2], request_id="r", handler="echo")
    lease = queue.dequeue("w", 1)[0]
    queue.ack(lease)
    with pytest.raises(LeaseLost):
        queue.ack(lease)
    info = read.request(queue, "r")
    assert info is not None and (info.done, info.leased, info.waiting) == (1, 0, 1)


def test_ack_after_lease_expiry_is_refused_even_before_the_reaper_runs(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1], request_id="r", lease_ms=1000, handler="echo")
    lease = queue.dequeue("w", 1)[0]
    clock.advance(1001)
    with pytest.raises(LeaseLost):
        queue.ack(lease)
    reaped = queue.reap()
    assert [(r.request_id, r.worker, r.outcome) for r in reaped] == [("r", "w", "waiting")]
    again = queue.dequeue("w", 1)[0]
    assert again.task_id == lease.task_id and again.attempt == 2
    with pytest.raises(LeaseLost):  # the first delivery's lease stays dead after redelivery
        queue.ack(lease)
    queue.ack(again)
    assert queue.state("r") == "done"


def test_an_expired_lease_nothing_reaped_yet_is_renewed_not_run_twice(
    queue: Queue, clock: FakeClock
) -> None:
    # Redis away (or the worker paused) longer than the lease: the first heartbeat after it
    # renews the lease instead of letting the reaper hand the running task to another worker.
    queue.submit([1], request_id="r", lease_ms=1000, handler="echo")
    lease = queue.dequeue("w", 1)[0]
    clock.advance(5000)
    assert queue.extend([lease]) == [1]
    assert queue.reap() == []
    assert queue.dequeue("w2", 1) == []
    queue.ack(lease)
    assert queue.state("r") == "done"
    assert queue.extend([lease]) == [-1]  # acked: gone for good


def test_a_reaped_lease_is_not_renewed(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1], request_id="r", lease_ms=1000, handler="echo")
    lease = queue.dequeue("w", 1)[0]
    clock.advance(1001)
    assert len(queue.reap()) == 1
    assert queue.extend([lease]) == [-1]


def test_extension_keeps_a_slow_task_from_being_reaped(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1], request_id="r", lease_ms=1000, handler="echo")
    lease = queue.dequeue("w", 1)[0]
    for _ in range(10):
        clock.advance(600)
        assert queue.extend([lease]) == [1]
        assert queue.reap() == []
    queue.ack(lease)
    assert queue.state("r") == "done"


def test_failure_retries_with_exponential_backoff_then_dead_letters(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([{"x": 1}], request_id="r", max_attempts=3, backoff_ms=1000, backoff_max_ms=3000,
                 handler="echo")
    delays = []
    for attempt in (1, 2):
        lease = queue.dequeue("w", 1)[0]
        assert lease.attempt == attempt
        out = queue.fail(lease, "ValueError: bad", "Traceback ...", worker="w")
        assert out.outcome == "delayed" and out.attempts == attempt
        delays.append(out.delay_ms)
        assert queue.dequeue("w", 1) == []  # not before its backoff is over
        clock.advance(out.delay_ms)
    assert 500 <= delays[0] <= 1000 and 1000 <= delays[1] <= 2000  # base * 2^(n-1), jittered
    lease = queue.dequeue("w", 1)[0]
    out = queue.fail(lease, "ValueError: bad", "Traceback ...", worker="w")
    assert (out.outcome, out.attempts) == ("dead", 3)
    assert queue.wait("r", timeout=0) == "failed"
    [letter] = read.dead_letters(queue)
    assert (letter.request_id, letter.task_id, letter.attempts) == ("r", lease.task_id, 3)
    assert (letter.error, letter.traceback, letter.worker) == (
        "ValueError: bad",
        "Traceback ...",
        "w",
    )
    assert letter.payload == '{"x":1}'


def test_dequeue_reports_when_the_next_retry_is_due(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1], request_id="r", backoff_ms=5000, backoff_max_ms=5000, handler="echo")
    out = queue.fail(queue.dequeue("w", 1)[0], "e")
    _, leases, next_due = queue.ack_and_dequeue("w", 1)
    assert leases == [] and next_due == out.delay_ms
    clock.advance(out.delay_ms)
    assert len(queue.ack_and_dequeue("w", 1)[1]) == 1


def test_fail_without_retry_dead_letters_at_once(queue: Queue) -> None:
    queue.submit([1, 2], request_id="r", max_attempts=5, handler="echo")
    out = queue.fail(queue.dequeue("w", 1)[0], "fatal", retry=False)
    assert (out.outcome, out.attempts) == ("dead", 1)
    queue.ack(queue.dequeue("w", 1)[0])
    assert queue.state("r") == "failed"


def test_fail_of_a_lost_lease_is_refused(queue: Queue) -> None:
    queue.submit([1], request_id="r", handler="echo")
    lease = queue.dequeue("w", 1)[0]
    queue.ack(lease)
    with pytest.raises(LeaseLost):
        queue.fail(lease, "late")
    assert read.dead_letters(queue) == []


def test_reaping_after_the_last_attempt_dead_letters_naming_the_worker(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1], request_id="r", max_attempts=1, lease_ms=500, handler="echo")
    queue.dequeue("w-17", 1)
    clock.advance(501)
    [reaped] = queue.reap()
    assert (reaped.worker, reaped.outcome) == ("w-17", "dead")
    [letter] = read.dead_letters(queue)
    assert "w-17" in letter.error and "lease expired" in letter.error
    assert queue.state("r") == "failed"


def test_release_returns_work_without_spending_an_attempt(queue: Queue) -> None:
    queue.submit([1], request_id="r", max_attempts=1, handler="echo")
    lease = queue.dequeue("w", 1)[0]
    assert queue.release([lease]) == [1]
    assert queue.release([lease]) == [-1]
    again = queue.dequeue("w", 1)[0]
    assert again.attempt == 1
    out = queue.fail(again, "boom")
    assert out.outcome == "dead"  # max_attempts=1: this was the first attempt


def test_ack_and_dequeue_is_one_round_trip_for_a_batch(
    queue: Queue, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue.submit(list(range(64)), request_id="r", handler="echo")
    _, batch, _ = queue.ack_and_dequeue("w", 32)
    assert len(batch) == 32
    sent: list[object] = []
    real = redis_client.execute_command

    def counting(*args: object, **kwargs: object) -> object:
        sent.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(redis_client, "execute_command", counting)
    accepted, batch2, _ = queue.ack_and_dequeue("w", 32, [lease.lease for lease in batch])
    assert accepted == [True] * 32 and len(batch2) == 32
    assert sent == ["FCALL"]  # 64 tasks moved (32 acked, 32 leased) in one round trip
    monkeypatch.undo()
    queue.ack_many(batch2)
    assert queue.state("r") == "done"


def test_wait_for_work_wakes_on_submit_and_times_out_when_idle(queue: Queue) -> None:
    assert queue.wait_for_work(0.05) is False
    queue.submit([1], handler="echo")
    assert queue.wait_for_work(1.0) is True


def test_a_batch_of_acks_counts_each_task_once_across_requests(queue: Queue) -> None:
    queue.submit(list(range(3)), request_id="a", handler="echo")
    queue.submit(list(range(2)), request_id="b", handler="echo")
    leases = queue.dequeue("w", 5)
    tokens = [lease.lease for lease in leases]
    accepted = queue.ack_many([*tokens, tokens[0], "a/1-1/9", "not-a-lease"])
    assert accepted == [True] * 5 + [False, False, False]
    assert queue.state("a") == "done" and queue.state("b") == "done"
    assert read.stats(queue).totals["done"] == 5


def test_ack_many_takes_more_leases_than_one_script_call_can(queue: Queue) -> None:
    queue.submit(list(range(2500)), request_id="r", handler="echo")
    leases = [lease for _ in range(3) for lease in queue.dequeue("w", 1000)]
    assert queue.ack_many(leases) == [True] * 2500
    assert queue.state("r") == "done"


@pytest.mark.parametrize(
    ("consumer", "count", "lease_ms"),
    [("~waiting", 1, 0), ("~dead", 1, 0), ("w 1", 1, 0), ("w", -1, 0), ("w", 1, 10**16),
     ("w", 1, 50), ("w", 1, 1.5)],
)
def test_ack_and_dequeue_refuses_reserved_names_and_bad_lease_lengths(
    queue: Queue, consumer: Any, count: Any, lease_ms: Any
) -> None:
    """Was: "~waiting" was accepted as a consumer (the engine's own pseudo-consumer), and a
    lease of 1e16 ms later broke an unrelated producer's submit after it wrote its request."""
    queue.submit([1], request_id="r", handler="echo")
    with pytest.raises(InvalidInput):
        queue.ack_and_dequeue(consumer, count, lease_ms=lease_ms)
    with pytest.raises(InvalidInput):
        queue.extend(["r/1-0/1"], lease_ms=10**16)
    assert queue.dequeue("w", 1)[0].payload == 1  # nothing was leased by the refused calls

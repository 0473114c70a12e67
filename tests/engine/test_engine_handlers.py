"""A worker leases only tasks whose handler it runs, decided inside the lease (issue 33): the
ready index has one slot per (priority, handler, tenant), a dequeue names the handlers its
consumer runs and passes over other handlers' slots; idle workers are handed only what they
run; work no live worker runs waits, counted per handler; queues an older engine wrote are
brought to this layout (upgrade.lua)."""

from __future__ import annotations

from typing import Any

import pytest

from core.queue import HandlerNotRun, Queue, handlers, read
from core.queue.client import wait_for_any
from tests.conftest import FakeClock


def rids(leases: list[Any]) -> list[str]:
    return [x.request_id for x in leases]


def test_a_worker_leases_only_what_it_runs_and_priority_holds_among_that(queue: Queue) -> None:
    queue.submit([1, 2], request_id="resize-high", handler="resize", priority=90)
    queue.submit([1], request_id="echo-low", handler="echo", priority=10)
    queue.submit([1], request_id="echo-mid", handler="echo", priority=50)

    got = queue.dequeue("w-echo", 10, handlers=["echo", "noop"])
    assert rids(got) == ["echo-mid", "echo-low"]  # by priority, the resize slots passed over
    assert queue.dequeue("w-echo", 10, handlers=["echo"]) == []
    assert rids(queue.dequeue("w-any", 10)) == ["resize-high", "resize-high"]  # no filter


def test_rotation_between_tenants_holds_among_the_slots_a_worker_runs(queue: Queue) -> None:
    for tenant in ("a", "b", "c"):
        queue.submit([1, 2, 3], request_id=f"{tenant}-resize", handler="resize", tenant=tenant)
        queue.submit([1, 2, 3], request_id=f"{tenant}-echo", handler="echo", tenant=tenant)
    order = [x.request_id for _ in range(6)
             for x in queue.dequeue("w", 1, handlers=["echo"])]
    assert order == ["a-echo", "b-echo", "c-echo"] * 2
    assert {x.request_id for x in queue.dequeue("w2", 9, handlers=["resize"])} == {
        "a-resize", "b-resize", "c-resize"}


def test_an_idle_worker_is_handed_only_what_it_runs(queue: Queue, clock: FakeClock) -> None:
    assert queue.ack_and_dequeue("w-resize", 1, idle_handoff=True, runs="resize")[1] == []
    clock.advance(10)  # w-echo idle since later: offered a handoff first, and passed over
    assert queue.ack_and_dequeue("w-echo", 1, idle_handoff=True, runs="echo")[1] == []
    queue.submit([1], request_id="r", handler="resize")
    assert queue.redis.zscore(queue.keys.idle, "w-echo|0|echo") == clock.now  # still idle
    handed = wait_for_any([queue], 0.01, "w-resize")
    assert handed is not None and rids(handed[1]) == ["r"]
    assert wait_for_any([queue], 0.01, "w-echo") is None  # nothing for it, not even a token
    queue.submit([1], request_id="e", handler="echo")
    handed = wait_for_any([queue], 0.01, "w-echo")
    assert handed is not None and rids(handed[1]) == ["e"]
    assert queue.leave_idle("w-echo", 0, "echo") == []


def test_waiting_work_is_counted_per_handler_and_what_no_live_worker_runs_is_named(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1, 2, 3], request_id="r", handler="resize", priority=60)
    queue.submit([1], request_id="e", handler="echo", priority=60)
    handlers.announce(queue, "w1", ["echo"], live_ms=10_000)
    stats = read.stats(queue)
    assert stats.waiting == 4 and stats.waiting_by_priority == {60: 4}
    assert stats.waiting_by_handler == {"echo": 1, "resize": 3}
    assert stats.unrunnable == {"resize": 3}
    handlers.announce(queue, "w2", ["resize"], live_ms=10_000)
    assert read.stats(queue).unrunnable == {}
    clock.advance(10_001)  # both announcements lapse with their workers' heartbeats
    assert read.stats(queue).unrunnable == {"echo": 1, "resize": 3}
    assert not read.drained(queue, ["echo"])
    queue.dequeue("w1", 5, handlers=["echo"])
    assert not read.drained(queue, ["echo"])  # leased, not done
    assert not read.drained(queue)


def test_a_burst_worker_is_drained_when_only_others_handlers_wait(queue: Queue) -> None:
    queue.submit([1], request_id="r", handler="resize")
    assert read.drained(queue, ["echo"])
    assert not read.drained(queue, ["resize"])


def test_a_claim_for_a_worker_that_does_not_run_the_handler_is_refused(queue: Queue) -> None:
    queue.submit([1], request_id="r", handler="resize")
    (lease,) = queue.dequeue("holder", 1)
    handlers.announce(queue, "w-echo", ["echo"])
    with pytest.raises(HandlerNotRun):
        queue.claim("r", lease.task_id, "w-echo")
    handlers.announce(queue, "w-both", ["echo", "resize"])
    assert queue.claim("r", lease.task_id, "w-both") == "holder"


def test_a_queue_written_by_an_older_engine_is_upgraded_and_loses_nothing(
    queue: Queue, redis_client: Any
) -> None:
    """Slots "<prio>:<tenant>", stats "w:<prio>" and the announcements' hash, as the engine
    before issue 33 wrote them: prepare() (every worker's start) brings them to this layout;
    a dequeue that meets an old slot first moves it too."""
    queue.submit([1, 2], request_id="a", handler="resize", priority=50, tenant="t")
    queue.submit([1], request_id="b", handler="echo", priority=50, tenant="t")
    k = queue.keys
    # Rewrite the index and stats as the old engine had them.
    redis_client.delete(k.tenant_ready(50, "resize", "t"), k.tenant_ready(50, "echo", "t"))
    redis_client.delete(k.ready)
    redis_client.zadd(f"{k.base}tr:50:t", {"a": 1, "b": 2})
    redis_client.zadd(k.ready, {"50:t": 49e12 + 1})
    redis_client.hdel(k.stats, "w:50:resize", "w:50:echo")
    redis_client.hset(k.stats, "w:50", 3)
    redis_client.hset(k.legacy_handlers, "resize", "1/old-worker")

    queue.prepare()
    assert set(redis_client.zrange(k.ready, 0, -1)) == {"50:echo:t", "50:resize:t"}
    assert not redis_client.exists(f"{k.base}tr:50:t", k.legacy_handlers)
    stats = redis_client.hgetall(k.stats)
    assert {f: v for f, v in stats.items() if f.startswith("w:")} == {
        "w:50:resize": "2", "w:50:echo": "1"}
    assert sorted(rids(queue.dequeue("w", 5))) == ["a", "a", "b"]


def test_a_dequeue_that_meets_an_old_slot_moves_its_requests(
    queue: Queue, redis_client: Any
) -> None:
    queue.submit([1], request_id="a", handler="resize", priority=50, tenant="t")
    k = queue.keys
    redis_client.delete(k.tenant_ready(50, "resize", "t"), k.ready)
    redis_client.zadd(f"{k.base}tr:50:t", {"a": 1})
    redis_client.zadd(k.ready, {"50:t": 49e12 + 1})
    assert queue.dequeue("w", 1, handlers=["echo"]) == []
    assert redis_client.zrange(k.ready, 0, -1) == ["50:resize:t"]
    assert rids(queue.dequeue("w", 1, handlers=["resize"])) == ["a"]

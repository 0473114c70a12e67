"""The reaper apart from any worker (issue 33): the services process reaps every registered
queue, so a queue whose workers are all gone still has its expired leases and the leases an
operator revoked moved on at their time, once per queue whoever else reaps (the reaper lock).
"""

from __future__ import annotations

from typing import Any

from core.queue import Queue, read
from core.queue.reaper import Reaper, reap_queue
from tests.conftest import FakeClock


def lease_one(queue: Queue, rid: str, consumer: str = "gone", lease_ms: int = 1000) -> Any:
    queue.submit([{"n": 1}], request_id=rid, handler="h", max_attempts=3)
    (lease,) = queue.ack_and_dequeue(consumer, 1, lease_ms=lease_ms)[1]
    return lease


def test_the_services_reaper_moves_on_expired_and_revoked_leases_of_a_queue_with_no_worker(
    queue: Queue, clock: FakeClock, redis_client: Any, prefix: str
) -> None:
    lease_one(queue, "expired")
    revoked = lease_one(queue, "revoked")
    assert queue.release_task("revoked", revoked.task_id) == "gone"  # the holder may still run
    reaper = Reaper(redis_client, lambda name: queue, prefix=prefix)
    assert reaper.tick() == 0  # nothing is past its expiry yet
    assert read.request(queue, "revoked").leased == 1  # type: ignore[union-attr]

    clock.advance(1001)
    queue.redis.delete(queue.keys.reaper_lock)
    assert reaper.tick() == 2
    for rid in ("expired", "revoked"):
        info = read.request(queue, rid)
        assert info is not None and (info.leased, info.waiting) == (0, 1), rid
    (again,) = queue.dequeue("heir", 1)  # the revoked one spent no attempt; the expired did
    (other,) = queue.dequeue("heir", 1)
    attempts = {again.request_id: again.attempt, other.request_id: other.attempt}
    assert attempts == {"expired": 2, "revoked": 1}
    assert read.attention(queue).expired_leases == 0


def test_one_reap_at_a_time_per_queue_whoever_runs_it(queue: Queue, clock: FakeClock) -> None:
    lease_one(queue, "r")
    clock.advance(1001)
    assert queue.try_reaper_lock("a-worker", 900)  # a worker of the queue reaps this second
    assert reap_queue(queue, "services", 900) is None
    assert read.request(queue, "r").leased == 1  # type: ignore[union-attr]
    queue.redis.delete(queue.keys.reaper_lock)
    reaped = reap_queue(queue, "services", 900)
    assert reaped is not None and [(r.request_id, r.outcome) for r in reaped] == [("r", "waiting")]


def test_the_reaper_covers_every_registered_queue_and_skips_an_invalid_name(
    redis_client: Any, prefix: str, clock: FakeClock
) -> None:
    queues = {n: Queue(redis_client, n, prefix=prefix, clock=clock) for n in ("a", "b")}
    for q in queues.values():
        lease_one(q, "r")
    redis_client.zadd(f"{prefix}:queues", {"bad name!": 1})
    clock.advance(1001)
    assert Reaper(redis_client, queues.__getitem__, prefix=prefix).tick() == 2
    for q in queues.values():
        assert read.request(q, "r").waiting == 1  # type: ignore[union-attr]

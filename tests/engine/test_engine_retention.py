"""How long Redis keeps a finished request: its retention, but at least a week while it has
dead letters that an operator may requeue (the database keeps the history)."""

from __future__ import annotations

import redis

from core.queue import Queue

WEEK_MS = 7 * 86_400_000


def test_a_done_request_is_kept_for_its_retention(queue: Queue, redis_client: redis.Redis) -> None:
    queue.submit([1], request_id="r", handler="echo", retention_ms=60_000)
    queue.ack(queue.dequeue("w", 1)[0])
    assert 0 < redis_client.pttl(queue.keys.request("r")) <= 60_000


def test_a_request_with_dead_letters_is_kept_a_week_whatever_its_retention(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1], request_id="r", handler="echo", retention_ms=60_000, max_attempts=1)
    queue.fail(queue.dequeue("w", 1)[0], "boom")
    assert queue.state("r") == "failed"
    assert redis_client.pttl(queue.keys.request("r")) > WEEK_MS - 60_000
    assert queue.requeue_request("r") == 1  # still possible after the retention


def _keys_of(client: redis.Redis, queue: Queue, rid: str) -> set[str]:
    """Which of request `rid`'s keys exist: its hash, stream, rel and dead-letter hashes."""
    base = queue.keys.request(rid)
    keys = [base, queue.keys.tasks(rid), f"{base}:rel", queue.keys.dead_map(rid)]
    return {k for k in keys if client.exists(k)}


def test_a_request_done_without_dead_letters_keeps_only_its_hash(
    queue: Queue, redis_client: redis.Redis
) -> None:
    """Whatever moved its tasks on the way (a release, an operator's claim and release, a
    requeued dead letter): each writes deliveries that did not count as attempts, which the
    request's completion must delete with its stream."""
    queue.submit([1, 2, 3, 4], request_id="r", handler="echo", max_attempts=1)
    queue.release(queue.dequeue("w", 1))
    lease = queue.dequeue("w", 1)[0]
    queue.release_task("r", lease.task_id)
    assert queue.release([lease]) == [-1]  # w's run stopped: the task waits again
    lease = queue.dequeue("w", 1)[0]
    assert queue.claim("r", lease.task_id, "w2") == "w"
    assert queue.release([lease]) == [-1]  # w's run stopped: the task goes to w2
    [claimed] = queue.leave_idle("w2")
    queue.fail(queue.dequeue("w", 1)[0], "boom")
    assert queue.requeue_request("r") == 1
    assert {queue.keys.request("r") + s for s in ("", ":tasks", ":rel")} <= _keys_of(
        redis_client, queue, "r"
    )
    while leases := queue.dequeue("w", 10):
        queue.ack_many(leases)
    queue.ack(claimed)
    assert queue.state("r") == "done"
    assert _keys_of(redis_client, queue, "r") == {queue.keys.request("r")}


def test_a_one_task_request_done_keeps_only_its_hash(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1], request_id="r", handler="echo")
    assert _keys_of(redis_client, queue, "r") == {queue.keys.request("r"), queue.keys.tasks("r")}
    queue.ack(queue.dequeue("w", 1)[0])
    assert _keys_of(redis_client, queue, "r") == {queue.keys.request("r")}

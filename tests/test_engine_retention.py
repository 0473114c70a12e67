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

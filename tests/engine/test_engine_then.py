"""Follow-ups ("then" between requests, Producer.submit_after): a request held until its
parent completes, started once when the parent is done, cancelled with it, kept held while
the parent has failed (a requeue may still finish it)."""

from __future__ import annotations

import pytest
import redis

from core.queue import InvalidInput, Queue, UnknownRequest, read


def events_of(redis_client: redis.Redis, queue: Queue, rid: str, kind: str) -> list[dict[str, str]]:
    return [f for _, f in redis_client.xrange(queue.keys.events)
            if f["type"] == kind and f["request"] == rid]


def finish_all(queue: Queue, *, fail: bool = False) -> None:
    while leases := queue.dequeue("w", 10):
        for lease in leases:
            if fail:
                queue.fail(lease, "boom", "", worker="w", retry=False)
            else:
                queue.ack(lease)


def test_a_follow_up_waits_for_its_parent_then_runs_once(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2, 3], request_id="parent", handler="echo", concurrency=3)
    sub = queue.submit_after("parent", [{"combine": True}], request_id="next", handler="echo")
    assert (sub.created, sub.state, sub.total) == (True, "held", 1)
    leases = queue.dequeue("w", 10)
    # The follow-up's task is not handed out while the parent runs.
    assert {lease.request_id for lease in leases} == {"parent"}
    queue.ack_many(leases[:2])
    assert queue.state("next") == "held"
    assert queue.dequeue("w2", 10) == []
    queue.ack(leases[2])
    assert queue.state("parent") == "done"
    assert queue.state("next") == "active"
    [follow] = queue.dequeue("w", 10)
    assert (follow.request_id, follow.payload) == ("next", {"combine": True})
    queue.ack(follow)
    assert queue.wait("next", timeout=1) == "done"
    assert len(events_of(redis_client, queue, "next", "unheld")) == 1
    info = read.request(queue, "next")
    assert info is not None and info.after == "parent"
    parent = read.request(queue, "parent")
    assert parent is not None and parent.then == ("next",)


def test_submit_after_is_idempotent_and_refuses_an_unknown_parent(
    queue: Queue, redis_client: redis.Redis
) -> None:
    with pytest.raises(UnknownRequest):
        queue.submit_after("nosuch", [1], request_id="x", handler="echo")
    assert not redis_client.exists(queue.keys.request("x"), queue.keys.tasks("x"))
    queue.submit([1], request_id="p", handler="echo")
    queue.submit_after("p", [1], request_id="x", handler="echo")
    again = queue.submit_after("p", [1, 2], request_id="x", handler="echo")
    assert (again.created, again.state, again.total) == (False, "held", 1)
    parent = read.request(queue, "p")
    assert parent is not None and parent.then == ("x",)  # registered once
    with pytest.raises(InvalidInput):
        queue.submit_after("p", [], handler="echo")


def test_a_follow_up_of_a_done_parent_starts_at_once(queue: Queue) -> None:
    queue.submit([1], request_id="p", handler="echo")
    finish_all(queue)
    assert queue.state("p") == "done"
    sub = queue.submit_after("p", [1], request_id="n", handler="echo")
    assert sub.state == "active"
    assert [lease.request_id for lease in queue.dequeue("w", 5)] == ["n"]


def test_a_cancelled_parent_cancels_its_follow_ups_down_the_chain(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2], request_id="p", handler="echo")
    queue.submit_after("p", [1, 2], request_id="n1", handler="echo")
    queue.submit_after("n1", [1], request_id="n2", handler="echo")
    queue.cancel("p")
    assert [queue.state(r) for r in ("p", "n1", "n2")] == ["cancelled"] * 3
    info = read.request(queue, "n1")
    assert info is not None and (info.cancelled, info.waiting) == (2, 0)
    assert [f["state"] for f in events_of(redis_client, queue, "n2", "completed")] == ["cancelled"]
    # Submitted after the parent was cancelled: cancelled at once, nothing ever runs.
    assert queue.submit_after("p", [1], request_id="n3", handler="echo").state == "cancelled"
    assert queue.dequeue("w", 10) == []
    assert int(redis_client.hget(queue.keys.stats, "w:50:echo") or 0) == 0


def test_a_failed_parent_keeps_its_follow_up_held_until_a_requeue_finishes_it(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2], request_id="p", handler="echo", max_attempts=1)
    queue.submit_after("p", [1], request_id="n", handler="echo")
    [a, b] = queue.dequeue("w", 2)
    queue.ack(a)
    queue.fail(b, "boom", "", worker="w", retry=False)
    assert (queue.state("p"), queue.state("n")) == ("failed", "held")
    assert queue.dequeue("w", 5) == []
    assert queue.requeue_request("p") == 1
    [again] = queue.dequeue("w", 5)
    assert again.request_id == "p"
    queue.ack(again)
    assert (queue.state("p"), queue.state("n")) == ("done", "active")
    finish_all(queue)
    assert queue.state("n") == "done"
    assert len(events_of(redis_client, queue, "n", "unheld")) == 1


def test_an_operator_may_cancel_a_held_follow_up(queue: Queue) -> None:
    queue.submit([1], request_id="p", handler="echo")
    queue.submit_after("p", [1, 2], request_id="n", handler="echo")
    res = queue.cancel("n")
    assert (res.state, res.dropped, res.changed) == ("cancelled", 2, True)
    finish_all(queue)
    assert (queue.state("p"), queue.state("n")) == ("done", "cancelled")


def test_a_streamed_parent_releases_its_follow_up_when_sealed_and_finished(queue: Queue) -> None:
    queue.open(request_id="p", handler="echo")
    queue.submit_after("p", [1], request_id="n", handler="echo")
    queue.add("p", [1])
    finish_all(queue)  # p's task done, but p is open: nothing completes yet
    assert (queue.state("p"), queue.state("n")) == ("open", "held")
    queue.seal("p")
    assert (queue.state("p"), queue.state("n")) == ("done", "active")


def test_held_tasks_are_not_counted_as_work_that_can_run(
    queue: Queue, redis_client: redis.Redis
) -> None:
    """A held request's tasks are waiting (its counters say so) but not in the queue's
    waiting stats, so a --burst worker stops when only held work is left."""
    queue.submit([1], request_id="p", handler="echo", max_attempts=1)
    queue.submit_after("p", [1, 2], request_id="n", handler="echo")
    info = read.request(queue, "n")
    assert info is not None and info.waiting == 2
    assert int(redis_client.hget(queue.keys.stats, "w:50:echo") or 0) == 1
    finish_all(queue, fail=True)
    assert read.drained(queue)  # p failed: n stays held, and nothing can run
    assert queue.requeue_request("p") == 1
    finish_all(queue)
    assert queue.state("n") == "done"
    assert int(redis_client.hget(queue.keys.stats, "w:50:echo") or 0) == 0
    queue.submit([1], request_id="p2", handler="echo")
    queue.submit_after("p2", [1, 2], request_id="n2", handler="echo")
    queue.cancel("n2")
    assert int(redis_client.hget(queue.keys.stats, "w:50:echo") or 0) == 1

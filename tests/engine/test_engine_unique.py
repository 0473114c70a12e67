"""Unique, deduplicated and debounced submits (issue 37), decided in the same atomic call as
the submit: while a request holds its unique key (in its scope), another submit of the key
creates nothing and answers with the holder, after replacing its tasks or delaying it if
asked; the key is let go when the scope ends."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from core.queue import InvalidInput, Queue, read
from tests.conftest import FakeClock


def submit(queue: Queue, payload: Any = 1, **kw: Any) -> Any:
    return queue.submit([payload], handler="h", unique_key="order-42", **kw)


def test_a_second_submit_of_a_key_returns_the_request_that_holds_it(queue: Queue) -> None:
    first = submit(queue)
    again = submit(queue, 2)
    assert first.created and not again.created
    assert again.request_id == first.request_id
    assert read.request(queue, first.request_id).total == 1  # type: ignore[union-attr]
    assert read.stats(queue).totals.get("duplicates") == 1
    (lease,) = queue.dequeue("w", 5)
    assert lease.payload == 1
    assert submit(queue, 3).request_id == first.request_id  # running: "active" holds it
    queue.ack(lease)
    third = submit(queue, 4)  # done: the scope ended
    assert third.created and third.request_id != first.request_id


def test_waiting_scope_lets_go_at_the_first_start(queue: Queue) -> None:
    first = submit(queue, unique_scope="waiting")
    assert submit(queue, unique_scope="waiting").request_id == first.request_id
    queue.dequeue("w", 1)
    assert submit(queue, unique_scope="waiting").created


def test_done_scope_keeps_the_key_a_while_after_done_not_after_a_failure(
    queue: Queue, clock: FakeClock, redis_client: Any
) -> None:
    first = submit(queue, unique_scope="done+1h")
    (lease,) = queue.dequeue("w", 1)
    queue.ack(lease)
    again = submit(queue, unique_scope="done+1h")
    assert not again.created and again.request_id == first.request_id
    ttl = redis_client.pttl(f"{queue.keys.base}uniq:order-42")
    assert 3_500_000 < ttl <= 3_600_000
    redis_client.delete(f"{queue.keys.base}uniq:order-42")  # as its TTL would
    failing = submit(queue, unique_scope="done+1h", max_attempts=1)
    (lease,) = queue.dequeue("w", 1)
    queue.fail(lease, "boom", retry=False)
    assert submit(queue, unique_scope="done+1h").request_id != failing.request_id


def test_replace_swaps_the_tasks_of_a_request_that_has_not_started(queue: Queue) -> None:
    first = submit(queue, {"v": 1})
    again = queue.submit([{"v": 2}, {"v": 3}], handler="h", unique_key="order-42",
                         on_duplicate="replace")
    assert again.request_id == first.request_id
    info = read.request(queue, first.request_id)
    assert info is not None and (info.total, info.waiting) == (2, 2)
    assert read.stats(queue).waiting == 2
    leases = queue.dequeue("w", 5)
    assert [x.payload for x in leases] == [{"v": 2}, {"v": 3}]
    # Started: a replace now only returns the holder.
    submit(queue, {"v": 9}, on_duplicate="replace")
    assert read.request(queue, first.request_id).total == 2  # type: ignore[union-attr]


def test_delay_pushes_a_scheduled_holder_later_for_debounce(
    queue: Queue, clock: FakeClock
) -> None:
    first = submit(queue, delay=timedelta(seconds=10), on_duplicate="delay")
    clock.advance(5000)
    again = submit(queue, delay=timedelta(seconds=10), on_duplicate="delay")
    assert again.request_id == first.request_id and again.due_ms == clock.now + 10_000
    clock.advance(6000)  # the first due time has passed: still waiting for the second
    assert queue.dequeue("w", 5) == []
    clock.advance(4000)
    assert [x.request_id for x in queue.dequeue("w", 5)] == [first.request_id]


def test_many_producers_at_once_leave_exactly_one_request(
    queue: Queue, redis_server: Any, prefix: str
) -> None:
    import redis

    made: list[str] = []

    def produce() -> None:
        client = redis.Redis.from_url(redis_server.url, decode_responses=True)
        q = Queue(client, "q", prefix=prefix)
        for i in range(200):
            made.append(q.submit([i], handler="h", unique_key="burst").request_id)
        client.close()

    threads = [threading.Thread(target=produce) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(made)) == 1 and len(made) == 1600
    assert read.stats(queue).totals.get("duplicates") == 1599


def test_a_flow_with_a_unique_key_creates_nothing_when_a_duplicate(queue: Queue) -> None:
    from core.queue import FollowUp

    first = queue.submit_flow([1], handler="h", unique_key="job:/out/a",
                              then=FollowUp([2], handler="h"))
    again = queue.submit_flow([1], handler="h", unique_key="job:/out/a",
                              then=FollowUp([2], handler="h"))
    assert not again.request.created
    assert again.request.request_id == first.request.request_id and again.then == (None,)


@pytest.mark.parametrize("kw", [
    {"unique_key": "a b"}, {"unique_key": "k", "unique_scope": "forever"},
    {"unique_key": "k", "unique_scope": "done"}, {"unique_key": "k", "on_duplicate": "merge"},
    {"unique_key": "k", "unique_scope": "done+soon"},
])
def test_a_bad_unique_option_is_refused(queue: Queue, kw: Any) -> None:
    with pytest.raises(InvalidInput):
        queue.submit([1], handler="h", **kw)


def test_the_request_shows_its_key_scope_and_resources(queue: Queue) -> None:
    first = queue.submit([1], handler="h", unique_key="order-42", unique_scope="done+1h",
                         resources=["db", "api"])
    info = read.request(queue, first.request_id)
    assert info is not None
    assert (info.unique_key, info.unique_scope) == ("order-42", "done+3600s")
    assert info.resources == ("api", "db")
    plain = read.request(queue, queue.submit([1], handler="h").request_id)
    assert plain is not None and (plain.unique_key, plain.unique_scope, plain.resources) == (
        "", "", ())


def test_the_submitted_event_carries_the_key(queue: Queue, redis_client: Any) -> None:
    from core.queue import FollowUp

    a = queue.submit([1], handler="h", unique_key="order-42").request_id
    b = queue.submit([1], handler="h", unique_key="later", delay=60).request_id
    c = queue.submit_flow([1], handler="h", unique_key="job:/out/a",
                          then=FollowUp([2], handler="h")).request.request_id
    d = queue.submit([1], handler="h").request_id
    submitted = {f["request"]: f for _, f in redis_client.xrange(queue.keys.events)
                 if f["type"] == "submitted"}
    assert submitted[a]["key"] == "order-42" and submitted[b]["key"] == "later"
    assert submitted[c]["key"] == "job:/out/a" and "key" not in submitted[d]


def test_a_flow_hands_its_key_to_its_follow_up_until_the_last_step_is_done(
    queue: Queue,
) -> None:
    from core.queue import FollowUp

    def flow() -> Any:
        return queue.submit_flow([1], handler="h", unique_key="job:/out/a",
                                 then=FollowUp([2], handler="h"))

    first = flow()
    (combine,) = first.then
    assert combine is not None
    (lease,) = queue.dequeue("w", 1)
    queue.ack(lease)  # the first step is done: the follow-up starts and holds the key
    info = read.request(queue, combine.request_id)
    assert info is not None and info.unique_key == "job:/out/a"
    again = flow()
    assert not again.created and again.request.request_id == combine.request_id
    (lease,) = queue.dequeue("w", 1)
    queue.ack(lease)  # the last step is done: the key is free
    assert flow().created


def test_a_waiting_scope_is_not_handed_to_a_follow_up(queue: Queue) -> None:
    from core.queue import FollowUp

    first = queue.submit_flow([1], handler="h", unique_key="k", unique_scope="waiting",
                              then=FollowUp([2], handler="h"))
    queue.dequeue("w", 1)  # started: the key is free already
    assert queue.submit([1], handler="h", unique_key="k", unique_scope="waiting").created
    assert first.created

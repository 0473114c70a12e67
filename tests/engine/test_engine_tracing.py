"""The engine's part of tracing (issue 38): a submit keeps the producer's W3C traceparent with
its request in the same call, and a lease hands it to the worker with the lease wait, in the
reply it already receives; requests without one get the reply they always had."""

from __future__ import annotations

import time

import pytest

from core.queue import FollowUp, InvalidInput, Queue, read
from core.queue.base import leases_from_handoff

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_submits_traceparent_is_kept_and_handed_to_the_worker_with_its_wait(
    live_queue: Queue,
) -> None:
    queue = live_queue  # the lease wait is on the Redis server's clock, as stream ids are
    t0 = time.monotonic()
    queue.submit(["a", "b"], handler="h", request_id="r", traceparent=TP)
    assert read.request(queue, "r").traceparent == TP
    submitted = [f for _, f in queue.redis.xrange(queue.keys.events) if f["type"] == "submitted"]
    assert submitted[0]["tp"] == TP  # what the mirror's search and the request page read
    time.sleep(0.25)
    leases = queue.dequeue("w", 2)
    waited = (time.monotonic() - t0) * 1000
    assert [x.trace for x in leases] == [TP, TP]
    assert all(240 <= x.wait_ms <= waited + 5 for x in leases), [x.wait_ms for x in leases]


def test_a_request_without_one_leases_as_before(queue: Queue) -> None:
    queue.submit(["a"], handler="h", request_id="r")
    assert read.request(queue, "r").traceparent == ""
    reply = queue._run("dequeue", [queue._now(), "w", 1, 0, 0, "", "", ""])
    assert len(reply) == 3  # no fourth element: nothing more on the wire
    assert "tp" not in queue.redis.hgetall(queue.keys.request("r"))


def test_a_retry_reports_its_wait_since_it_went_back_to_waiting(live_queue: Queue) -> None:
    queue = live_queue
    queue.submit(["a"], handler="h", request_id="r", traceparent=TP, backoff_ms=0)
    first = queue.dequeue("w", 1)[0]
    assert first.delivery == 1
    time.sleep(0.3)  # the first run's time is no part of the next wait
    queue.release([first])  # back to waiting now, not an attempt
    t0 = time.monotonic()
    time.sleep(0.05)
    again = queue.dequeue("w", 1)[0]
    assert (again.trace, again.delivery, again.attempt) == (TP, 2, 1)
    assert 45 <= again.wait_ms <= (time.monotonic() - t0) * 1000 + 5


def test_a_delayed_requests_wait_counts_from_its_due_time(live_queue: Queue) -> None:
    t0 = time.monotonic()
    live_queue.submit(["a"], handler="h", request_id="r", traceparent=TP, delay=0.3)
    assert read.request(live_queue, "r").traceparent == TP  # its due time kept apart
    time.sleep(0.5)
    wait = live_queue.dequeue("w", 1)[0].wait_ms
    assert 150 <= wait <= (time.monotonic() - t0) * 1000 - 300 + 5


def test_a_flows_follow_ups_carry_the_same_context(queue: Queue) -> None:
    queue.submit_flow(["a"], handler="h", request_id="r", traceparent=TP,
                      then=FollowUp(["c"], handler="h", request_id="f"))
    assert read.request(queue, "f").traceparent == TP
    queue.ack(queue.dequeue("w", 1)[0])
    assert queue.dequeue("w", 1)[0].trace == TP  # the follow-up's task, now released


TP2 = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.mark.parametrize("parent_done", [False, True])
def test_a_follow_up_submitted_after_keeps_its_own_context(
    queue: Queue, parent_done: bool
) -> None:
    queue.submit(["a"], handler="h", request_id="p", traceparent=TP)
    if parent_done:  # then the follow-up is released in the same call that creates it
        queue.ack(queue.dequeue("w", 1)[0])
    queue.submit_after("p", ["c"], handler="h", request_id="f", traceparent=TP2)
    assert read.request(queue, "f").traceparent == TP2
    submitted = [f for _, f in queue.redis.xrange(queue.keys.events)
                 if f["type"] == "submitted" and f["request"] == "f"]
    assert submitted[0]["tp"] == TP2 and submitted[0]["after"] == "p"
    if not parent_done:
        queue.ack(queue.dequeue("w", 1)[0])
    assert queue.dequeue("w", 1)[0].trace == TP2  # the follow-up's task


def test_a_follow_up_without_one_keeps_none(queue: Queue) -> None:
    queue.submit(["a"], handler="h", request_id="p", traceparent=TP)
    queue.submit_after("p", ["c"], handler="h", request_id="f")
    assert read.request(queue, "f").traceparent == ""
    assert "tp" not in queue.redis.hgetall(queue.keys.request("f"))
    with pytest.raises(InvalidInput, match="traceparent must be a W3C trace context"):
        queue.submit_after("p", ["c"], handler="h", request_id="g", traceparent="x")
    assert read.request(queue, "g") is None


def test_an_idle_workers_handoff_carries_the_context(queue: Queue) -> None:
    assert queue.ack_and_dequeue("w", 1, idle_handoff=True)[1] == []  # idle, registered
    queue.submit(["a"], handler="h", request_id="r", traceparent=TP)
    item = queue.redis.lpop(queue.keys.handoff("w"))
    (lease,) = leases_from_handoff(item)
    assert (lease.payload, lease.trace, lease.wait_ms) == ("a", TP, 0)


@pytest.mark.parametrize("bad", [
    "0af7651916cd43dd8448eb211c80319c", "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    "00-00000000000000000000000000000000-b7ad6b7169203331-01", TP.upper(), TP + "-x", 7,
])
def test_a_malformed_traceparent_is_refused_before_anything_is_written(
    queue: Queue, bad: object
) -> None:
    with pytest.raises(InvalidInput, match="traceparent must be a W3C trace context"):
        queue.submit(["a"], handler="h", request_id="r", traceparent=bad)  # type: ignore[arg-type]
    assert read.request(queue, "r") is None


def test_a_traced_handoff_is_read_back_by_every_reader_of_the_list(queue: Queue) -> None:
    """[leases, traces] on a handoff list: picked up by the next dequeue, returned by
    leave_idle, and taken back by a reclaim of the worker (reclaim.lua reads it too)."""
    for rid, worker in (("a", "w1"), ("b", "w2"), ("c", "w3")):
        assert queue.ack_and_dequeue(worker, 1, lease_ms=5000, idle_handoff=True)[1] == []
        queue.submit([rid], handler="h", request_id=rid, traceparent=TP)
        assert queue.redis.llen(queue.keys.handoff(worker)) == 1
    _, got, _ = queue.ack_and_dequeue("w1", 4, lease_ms=5000, idle_handoff=True)
    assert [(x.payload, x.trace) for x in got] == [("a", TP)]
    assert [(x.payload, x.trace) for x in queue.leave_idle("w2", 5000)] == [("b", TP)]
    queue.heartbeat("w3", {"queues": ["q"]}, ttl_ms=1000)
    assert queue.reclaim_worker("w3", crashed=True)[0] == 1
    assert [(x.payload, x.trace) for x in queue.dequeue("w4", 1)] == [("c", TP)]

"""Flows (Producer.submit_flow): a request, the follow-ups held behind it and a record beside
it, created by one atomic call; idempotent on the request's id; nothing written when refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from core.queue import (
    FollowUp,
    InvalidInput,
    PayloadTooLarge,
    Queue,
    RequestIdTaken,
    read,
)
from core.queue.options import SUBMIT_BATCH
from tests.conftest import FakeClock, keys_under


def finish_all(queue: Queue) -> int:
    n = 0
    while leases := queue.dequeue("w", 10):
        queue.ack_many(leases)
        n += len(leases)
    return n


def snapshot(client: redis.Redis, prefix: str) -> dict[str, Any]:
    """Every key of the test's prefix with its value and when it expires."""
    return {k: (client.dump(k), client.pexpiretime(k)) for k in keys_under(client, prefix)}


def events_of(client: redis.Redis, queue: Queue, rid: str) -> list[dict[str, str]]:
    return [f for _, f in client.xrange(queue.keys.events) if f["request"] == rid]


def a_flow(queue: Queue, rid: str = "p", **kw: Any) -> Any:
    args: dict[str, Any] = {
        "handler": "echo", "request_id": rid, "priority": 70, "tenant": "t1",
        "then": FollowUp([{"combine": rid}], handler="echo", request_id=f"{rid}.next",
                         priority=60, max_attempts=2),
        "record": queue.records("job").new(rid, {"spec": "{}", "n": 2}, keep_s=3600,
                                           at_ms=1234),
    } | kw
    return queue.submit_flow([{"i": 1}, {"i": 2}], **args)


def test_a_flow_creates_the_request_its_held_follow_up_and_its_record_in_one_call(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    flow = a_flow(queue, seal=False)
    assert flow.created
    assert (flow.request.state, flow.request.total, flow.request.due_ms) == ("open", 2, 0)
    [nxt] = flow.then
    assert nxt is not None and (nxt.request_id, nxt.created, nxt.state, nxt.total) == (
        "p.next", True, "held", 1)
    p, n = read.request(queue, "p"), read.request(queue, "p.next")
    assert p is not None
    assert (p.priority, p.tenant, p.then, p.after) == (70, "t1", ("p.next",), None)
    assert n is not None and (n.priority, n.max_attempts, n.after) == (60, 2, "p")
    assert queue.records("job").all("p") == {"spec": "{}", "n": "2"}
    assert 3590 <= redis_client.ttl(queue.keys.record("job", "p")) <= 3600
    assert redis_client.zrange(queue.keys.record_index("job"), 0, -1, withscores=True) == [
        ("p", 1234.0)]
    # The events the mirror reads: each request's "submitted", the follow-up's with its parent.
    [sub_p] = events_of(redis_client, queue, "p")
    [sub_n] = events_of(redis_client, queue, "p.next")
    assert (sub_p["type"], sub_p["tasks"], sub_p["priority"]) == ("submitted", "2", "70")
    assert (sub_n["type"], sub_n["tasks"], sub_n["after"]) == ("submitted", "1", "p")
    # Only the request's tasks count as work that can run; the held one's once released.
    assert redis_client.hgetall(queue.keys.stats) == {"w:70:echo": "2", "submitted": "3"}


def test_a_flow_stores_what_submit_and_submit_after_store(
    queue: Queue, redis_client: redis.Redis
) -> None:
    """The flow's Lua repeats submit.lua's and submit_after.lua's creation (submit stays as
    lean as it is): the hashes, streams and indexes come out the same, field for field."""
    opts: dict[str, Any] = {"priority": 30, "concurrency": 4, "tenant": "tz", "max_attempts": 5,
                            "lease_ms": 5000, "retention_ms": 60_000, "backoff_ms": 10,
                            "backoff_max_ms": 20}
    for seal, due in ((True, None), (False, None), (False, 60.0), (True, 60.0)):
        tag = f"{int(seal)}{int(due is not None)}"
        queue.submit_flow([1, 2], handler="echo", request_id=f"f{tag}", seal=seal, delay=due,
                          then=FollowUp([3], handler="h2", request_id=f"f{tag}n", **opts),
                          **opts)
        queue.submit([1, 2], handler="echo", request_id=f"s{tag}", seal=seal, delay=due, **opts)
        queue.submit_after(f"s{tag}", [3], handler="h2", request_id=f"s{tag}n", **opts)
        for a, b in ((f"f{tag}", f"s{tag}"), (f"f{tag}n", f"s{tag}n")):
            ha = redis_client.hgetall(queue.keys.request(a))
            hb = redis_client.hgetall(queue.keys.request(b))
            if "then" in ha:
                assert (ha.pop("then"), hb.pop("then")) == (f"f{tag}n", f"s{tag}n")
            if "after" in ha:
                assert (ha.pop("after"), hb.pop("after")) == (f"f{tag}", f"s{tag}")
            assert ha == hb, (seal, due)
            ta = [f for _, f in redis_client.xrange(queue.keys.tasks(a))]
            assert ta == [f for _, f in redis_client.xrange(queue.keys.tasks(b))]
            assert redis_client.xinfo_groups(queue.keys.tasks(a))[0]["name"] == "g"
            state = ha["state"]
            assert redis_client.zscore(queue.keys.state_index(state), a) is not None
    sched = redis_client.zrange(queue.keys.scheduled, 0, -1)
    assert sorted(sched) == ["f01", "f11", "s01", "s11"]


def test_the_follow_up_runs_once_its_request_is_done(queue: Queue) -> None:
    a_flow(queue)
    leases = queue.dequeue("w", 10)
    assert sorted(lease.payload["i"] for lease in leases) == [1, 2]
    assert {lease.request_id for lease in leases} == {"p"}  # the held one is not handed out
    queue.ack(leases[0])
    assert queue.state("p.next") == "held"
    queue.ack(leases[1])
    assert (queue.state("p"), queue.state("p.next")) == ("done", "active")
    [nxt] = queue.dequeue("w", 10)
    assert (nxt.request_id, nxt.payload) == ("p.next", {"combine": "p"})
    queue.ack(nxt)
    assert queue.wait("p.next", timeout=1) == "done"


def test_a_flow_open_for_add_takes_more_tasks_and_its_seal_releases_the_follow_up(
    queue: Queue,
) -> None:
    a_flow(queue, seal=False)
    assert queue.add("p", [{"i": 3}, {"i": 4}]) == 4
    assert finish_all(queue) == 4
    assert (queue.state("p"), queue.state("p.next")) == ("open", "held")  # more may come
    assert queue.seal("p") == "done"
    assert queue.state("p.next") == "active"
    assert finish_all(queue) == 1
    assert queue.state("p.next") == "done"


def test_a_retried_flow_changes_nothing_and_says_what_exists(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    first = a_flow(queue, seal=False)
    queue.add("p", [{"i": 3}])
    before = snapshot(redis_client, prefix)
    again = a_flow(queue, seal=True, priority=10,
                   record=queue.records("job").new("p", {"other": "x"}, keep_s=60, at_ms=9))
    assert not again.created
    assert (again.request.state, again.request.total) == ("open", 3)
    [nxt] = again.then
    assert nxt is not None and (nxt.created, nxt.state, nxt.total) == (False, "held", 1)
    assert snapshot(redis_client, prefix) == before
    assert first.then[0] is not None and first.then[0].created


def test_a_flow_over_an_existing_request_says_which_follow_ups_are_its_own_and_writes_nothing(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    queue.submit([1], handler="echo", request_id="p")
    queue.submit([1], handler="echo", request_id="p.next")  # a request, not p's follow-up
    queue.submit_after("p", [1], handler="echo", request_id="p.then")
    before = snapshot(redis_client, prefix)
    flow = a_flow(queue, then=[FollowUp([1], handler="echo", request_id="p.next"),
                               FollowUp([1], handler="echo", request_id="p.then"),
                               FollowUp([1], handler="echo", request_id="p.other")])
    assert (flow.created, flow.request.state) == (False, "active")
    assert [s and (s.request_id, s.created, s.state) for s in flow.then] == [
        None, ("p.then", False, "held"), None]
    assert snapshot(redis_client, prefix) == before


def test_a_follow_up_id_that_is_another_requests_is_refused_with_nothing_written(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    queue.submit([1], handler="echo", request_id="p.next")
    before = snapshot(redis_client, prefix)
    with pytest.raises(RequestIdTaken, match=r"follow-up id 'p.next' is an existing request's; "
                                             "nothing was written"):
        a_flow(queue)
    assert snapshot(redis_client, prefix) == before


def test_a_delayed_flow_waits_for_its_time_and_its_follow_up_for_its_completion(
    queue: Queue, clock: FakeClock
) -> None:
    flow = a_flow(queue, seal=False, delay=timedelta(seconds=60))
    assert (flow.request.state, flow.request.due_ms) == ("scheduled", clock.now + 60_000)
    assert flow.then[0] is not None and flow.then[0].state == "held"
    assert queue.dequeue("w", 10) == []
    assert queue.add("p", [{"i": 3}]) == 3  # not sealed: it takes tasks while it waits
    clock.advance(59_999)
    assert queue.dequeue("w", 10) == []
    clock.advance(1)
    leases = queue.dequeue("w", 10)
    assert sorted(lease.payload["i"] for lease in leases) == [1, 2, 3]
    assert queue.state("p") == "open"  # due: the state it was submitted for
    queue.ack_many(leases)
    assert queue.seal("p") == "done"
    assert finish_all(queue) == 1
    assert queue.state("p.next") == "done"


def test_a_flow_at_a_time_runs_then_or_now_if_that_time_is_past(
    queue: Queue, clock: FakeClock
) -> None:
    at = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=clock.now + 5000)
    flow = a_flow(queue, run_at=at)
    assert (flow.request.state, flow.request.due_ms) == ("scheduled", clock.now + 5000)
    assert queue.run_now("p") == ("active", True)  # sealed: active once due
    past = a_flow(queue, "q", run_at=at - timedelta(seconds=10))
    assert (past.request.state, past.request.due_ms) == ("active", 0)
    assert {lease.request_id for lease in queue.dequeue("w", 10)} == {"p", "q"}


def test_a_flow_hands_its_work_to_an_idle_worker(queue: Queue) -> None:
    assert queue.ack_and_dequeue("idle1", 8, lease_ms=5000, idle_handoff=True)[1] == []
    a_flow(queue)
    handed = queue.leave_idle("idle1", 5000)
    assert [lease.request_id for lease in handed] == ["p"]  # one task, the request's


def test_a_cancelled_flow_request_cancels_its_follow_up(queue: Queue) -> None:
    a_flow(queue)
    queue.cancel("p")
    assert (queue.state("p"), queue.state("p.next")) == ("cancelled", "cancelled")


def test_a_flow_replaces_the_record_an_expired_request_of_its_id_left(
    queue: Queue, redis_client: redis.Redis
) -> None:
    rec = queue.records("job")
    rec.create("p", {"spec": "old", "chunks": 9}, keep_s=60, at_ms=1)
    a_flow(queue)
    assert rec.all("p") == {"spec": "{}", "n": "2"}  # no field of the old one is left
    assert redis_client.zscore(queue.keys.record_index("job"), "p") == 1234


def test_a_flow_without_follow_ups_or_record_is_a_submit(queue: Queue) -> None:
    flow = queue.submit_flow([1], handler="echo", request_id="solo")
    assert (flow.created, flow.request.state, flow.then) == (True, "active", ())
    assert queue.records("job").all("solo") == {}
    two = queue.submit_flow([1], handler="echo", request_id="fan", then=[
        FollowUp([1], handler="echo", request_id="fan.a"),
        FollowUp([2, 3], handler="echo", request_id="fan.b")])
    assert [(s.request_id, s.total) for s in two.then if s] == [("fan.a", 1), ("fan.b", 2)]
    finish_all(queue)
    assert [queue.state(r) for r in ("fan", "fan.a", "fan.b")] == ["done"] * 3


@pytest.mark.parametrize(("call", "message"), [
    ({"tasks": []}, "a request needs at least one task (or submit with seal=False)"),
    ({"then": FollowUp([], handler="echo", request_id="n")},
     "follow-up 'n': a follow-up request needs at least one task"),
    ({"then": FollowUp([1], handler="echo", request_id="p")},
     "follow-up request id 'p' is used twice in the flow"),
    ({"then": [FollowUp([1], handler="echo", request_id="n"),
               FollowUp([1], handler="echo", request_id="n")]},
     "follow-up request id 'n' is used twice in the flow"),
    ({"then": FollowUp([1], handler="echo", request_id="bad id")},
     "invalid follow-up request id 'bad id'"),
    ({"then": FollowUp([1], handler="echo", priority=100)},
     "priority must be between 0 and 99, got 100"),
    ({"then": {"tasks": [1]}}, "then= takes a FollowUp or a list of them"),
    ({"then": [[1]]}, "then= takes FollowUp(tasks, handler=...) values"),
    ({"then": FollowUp([float("nan")], handler="echo", request_id="n")},
     "follow-up 'n': task 0 holds NaN or Infinity"),
    ({"tasks": list(range(SUBMIT_BATCH)), "then": FollowUp([1], handler="echo")},
     f"a flow is one atomic call of at most {SUBMIT_BATCH} tasks"),
    ({"record": {"spec": "x"}}, "record must be made by Records.new()"),
    ({"delay": 5, "run_at": datetime.now(UTC)}, "give run_at or delay, not both"),
    ({"seal": "no"}, "seal must be True or False"),
])
def test_bad_input_is_refused_before_anything_is_written(
    queue: Queue, redis_client: redis.Redis, prefix: str, call: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"tasks": [1], "handler": "echo", "request_id": "p"} | call
    with pytest.raises(InvalidInput) as refused:
        queue.submit_flow(args.pop("tasks"), **args)
    assert message in str(refused.value)
    assert keys_under(redis_client, prefix) == []


def test_a_too_large_follow_up_task_and_bad_records_are_named(
    queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    with pytest.raises(PayloadTooLarge, match="follow-up 'n': task 1 payload is") as big:
        queue.submit_flow([1], handler="echo", then=FollowUp(
            [1, "x" * 70_000], handler="echo", request_id="n"))
    assert big.value.index == 1
    other = Queue(queue.redis, "elsewhere", prefix=queue.keys.prefix)
    with pytest.raises(InvalidInput, match="another queue's record"):
        queue.submit_flow([1], handler="echo", record=other.records("job").new(
            "p", {"a": 1}, keep_s=1, at_ms=0))
    rec = queue.records("job")
    for values, keep, said in (({}, 1, "at least one field"),
                               ({"a": True}, 1, "a value is text or a number"),
                               ({"a": None}, 1, "a value is text or a number"),
                               ({"a": 1}, 0, "keep_s must be between 1 and")):
        with pytest.raises(InvalidInput, match=said):
            rec.new("p", values, keep_s=keep, at_ms=0)
    assert keys_under(redis_client, prefix) == []

"""Limits on keys, decided inside the lease (issue 37): a capped or rate-limited key's tasks are
never leased past the limit (no failure, no attempt spent), other work is served meanwhile,
a change applies at the next dequeue, and a dead worker's concurrency slot comes back when
its lease is reaped. Time is the test's clock (the engine's `now`)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from core.queue import InvalidInput, Queue, read
from tests.conftest import FakeClock


def rids(leases: list[Any]) -> list[str]:
    return [x.request_id for x in leases]


def test_a_rate_limit_on_a_handler_holds_its_starts_and_serves_the_rest(
    queue: Queue, clock: FakeClock
) -> None:
    queue.set_limit("api", on="handler", value="call-api", rate=10, per=1.0)
    queue.submit([{"i": i} for i in range(30)], request_id="api", handler="call-api",
                 concurrency=100, priority=90)
    queue.submit([{"i": i} for i in range(5)], request_id="local", handler="echo",
                 priority=10)
    got = queue.dequeue("w", 100)
    assert Counter(rids(got)) == {"api": 10, "local": 5}  # the rest of api waits; no attempt
    leased, next_due = queue.ack_and_dequeue("w", 100)[1:]
    assert leased == [] and 1 <= next_due <= 1000  # when the window lets the next start
    clock.advance(999)
    assert queue.dequeue("w", 100) == []
    clock.advance(1)
    assert rids(queue.dequeue("w", 100)) == ["api"] * 10
    info = read.request(queue, "api")
    assert info is not None and (info.waiting, info.leased, info.dead) == (10, 20, 0)


def test_no_window_of_the_rate_holds_more_starts_than_it_allows(
    queue: Queue, clock: FakeClock
) -> None:
    """Dequeues at random times and of random sizes, by several consumers: in every window
    of the limit's length, by the engine's clock at lease, at most `rate` starts."""
    rnd = random.Random(33)
    queue.set_limit("r", on="queue", rate=7, per=0.5)
    queue.submit([{}] * 400, handler="h", concurrency=1000)
    starts: list[int] = []
    while len(starts) < 300:
        clock.advance(rnd.choice([0, 1, 3, 17, 40, 120, 499, 500, 501]))
        got = queue.dequeue(f"w{rnd.randrange(4)}", rnd.randint(1, 12))
        starts += [clock.now] * len(got)
    for i, t in enumerate(starts):
        window = [s for s in starts[i:] if s < t + 500]
        assert len(window) <= 7, f"{len(window)} starts in [{t}, {t + 500})"


def test_a_concurrency_cap_on_a_tenant_comes_back_as_leases_end_or_are_reaped(
    queue: Queue, clock: FakeClock
) -> None:
    queue.set_limit("acme", on="tenant", value="acme", concurrency=3)
    queue.submit([{}] * 10, request_id="a", handler="h", tenant="acme", concurrency=10,
                 lease_ms=1000)
    queue.submit([{}] * 2, request_id="b", handler="h", tenant="other")
    first = queue.dequeue("w", 10)
    assert Counter(rids(first)) == {"a": 3, "b": 2}
    assert queue.dequeue("w", 10) == []
    queue.ack(next(x for x in first if x.request_id == "a"))
    assert rids(queue.dequeue("w", 10)) == ["a"]  # one ended, one more
    clock.advance(1001)  # the holder dies: its leases expire and are reaped
    assert len(queue.reap()) == 3
    assert rids(queue.dequeue("w2", 10)) == ["a"] * 3
    [use] = read.limits(queue)
    assert (use.limit.name, use.held) == ("acme", 3)


def test_a_limit_set_changed_or_removed_applies_at_the_next_dequeue(queue: Queue) -> None:
    queue.submit([{}] * 10, request_id="r", handler="h", concurrency=10)
    assert len(queue.dequeue("w", 2)) == 2
    queue.set_limit("cap", on="handler", value="h", concurrency=3)
    assert len(queue.dequeue("w", 10)) == 1  # 2 held already count
    queue.set_limit("cap", on="handler", value="h", concurrency=5)
    assert len(queue.dequeue("w", 10)) == 2
    assert queue.remove_limit("cap") is True
    assert len(queue.dequeue("w", 10)) == 5
    assert queue.remove_limit("cap") is False


def test_limits_and_handler_routing_together_serve_what_is_not_held_back(
    queue: Queue
) -> None:
    queue.set_limit("one", on="handler", value="a", concurrency=1)
    queue.submit([{}] * 3, request_id="a1", handler="a", priority=90)
    queue.submit([{}] * 3, request_id="b1", handler="b", priority=50)
    queue.submit([{}] * 3, request_id="c1", handler="c", priority=10)
    assert Counter(rids(queue.dequeue("w", 10, handlers=["a", "c"]))) == {"a1": 1, "c1": 3}
    assert rids(queue.dequeue("w", 10, handlers=["a", "b"])) == ["b1"] * 3


def test_an_idle_worker_is_handed_no_more_than_a_limit_allows(queue: Queue) -> None:
    queue.set_limit("slow", on="queue", concurrency=1)
    assert queue.ack_and_dequeue("w1", 1, idle_handoff=True)[1] == []
    assert queue.ack_and_dequeue("w2", 1, idle_handoff=True)[1] == []
    queue.submit([{}] * 5, request_id="r", handler="h", concurrency=5)
    info = read.request(queue, "r")
    assert info is not None and info.leased == 1  # one handed over, the other worker waits


@pytest.mark.parametrize("bad", [
    {"on": "host", "value": "x", "rate": 1},
    {"on": "handler", "value": "a|b", "rate": 1},
    {"on": "handler", "value": "h"},
    {"on": "queue", "value": "x", "rate": 1},
    {"on": "tenant", "value": "t", "rate": 0},
    {"on": "tenant", "value": "t", "concurrency": -1},
])
def test_a_bad_limit_is_refused_before_anything_is_written(queue: Queue, bad: Any) -> None:
    with pytest.raises(InvalidInput):
        queue.set_limit("x", **bad)
    assert read.limits(queue) == []


def test_a_resource_limit_holds_the_requests_that_declare_it_across_handlers(
    queue: Queue, clock: FakeClock
) -> None:
    """Two handlers share a warehouse connection pool of 2: at most 2 of their tasks run at
    once, whichever handler; a request that does not declare it is not held back."""
    queue.set_limit("pool", on="resource", value="warehouse", concurrency=2)
    queue.submit([{}] * 3, request_id="load", handler="load", resources=["warehouse"])
    queue.submit([{}] * 3, request_id="dump", handler="dump", resources=["warehouse", "s3"])
    queue.submit([{}] * 3, request_id="free", handler="dump")
    got = Counter(rids(queue.dequeue("w", 20)))
    assert got["free"] == 3 and got["load"] + got["dump"] == 2
    assert queue.dequeue("w", 20) == []
    info = read.request(queue, "load")
    assert info is not None and info.dead == 0


def test_resources_are_checked_names(queue: Queue) -> None:
    for bad in ("warehouse", ["ware house"], [1]):
        with pytest.raises(InvalidInput, match="resource"):
            queue.submit([{}], handler="h", resources=bad)  # type: ignore[arg-type]


def test_a_field_limit_holds_each_value_of_the_field_apart(
    queue: Queue, clock: FakeClock
) -> None:
    """Per customer: at most 2 of a customer's tasks at once; another customer's, and tasks
    without the field, are not held back; a held-back task's delivery spends no attempt."""
    queue.set_limit("per-customer", on="field", value="customer", concurrency=2)
    tasks = [{"customer": "a"}] * 4 + [{"customer": 7}] * 3 + [{"other": 1}]
    queue.submit(tasks, request_id="r", handler="h", concurrency=100, max_attempts=1)
    got = queue.dequeue("w", 20)
    by = Counter(str(x.payload.get("customer")) for x in got)
    assert by == {"a": 2, "7": 2, "None": 1}
    assert queue.dequeue("w", 20) == []
    queue.ack(next(x for x in got if x.payload.get("customer") == "a"))
    again = queue.dequeue("w", 20)
    assert [x.payload for x in again] == [{"customer": "a"}]
    assert again[0].attempt == 1  # held back before: not an attempt
    info = read.request(queue, "r")
    assert info is not None and (info.dead, info.leased, info.waiting) == (0, 5, 2)

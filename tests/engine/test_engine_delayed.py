"""Delayed requests (issue 19, item 1): submit(run_at=... | delay=...) makes a request
"scheduled"; its tasks are not leased before its due time and are leased right after it,
under the usual priorities and fair share; it can be added to, sealed, cancelled and run now;
the queue's figures count it. Time is the test's clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
import redis

from core.queue import InvalidInput, Queue, UnknownRequest, read
from core.queue.due import parse_at, parse_delay
from tests.conftest import FakeClock


def at(clock: FakeClock, ms: int) -> datetime:
    return datetime.fromtimestamp((clock.now + ms) / 1000, UTC)


@pytest.mark.parametrize("form", ["delay_s", "delay_td", "run_at_utc", "run_at_offset"])
def test_a_delayed_request_is_not_leased_before_its_time_and_is_right_after(
    queue: Queue, clock: FakeClock, form: str
) -> None:
    when = {
        "delay_s": {"delay": 10},
        "delay_td": {"delay": timedelta(seconds=10)},
        "run_at_utc": {"run_at": at(clock, 10_000)},
        "run_at_offset": {"run_at": at(clock, 10_000).astimezone(timezone(timedelta(hours=-5)))},
    }[form]
    sub = queue.submit([1, 2], request_id="r", handler="echo", **when)  # type: ignore[arg-type]
    assert (sub.created, sub.state, sub.total, sub.due_ms) == (True, "scheduled", 2,
                                                               clock.now + 10_000)
    assert queue.dequeue("w", 10) == []
    # A worker that found nothing is told how long until the due time (it blocks that long).
    assert queue.ack_and_dequeue("w", 10)[2] == 10_000
    clock.advance(9_999)
    assert queue.dequeue("w", 10) == []
    assert queue.state("r") == "scheduled"
    clock.advance(1)
    got = queue.dequeue("w", 10)
    assert sorted(lease.payload for lease in got) == [1, 2]
    assert queue.state("r") == "active"
    queue.ack_many(got)
    assert queue.wait("r", timeout=1) == "done"
    info = read.request(queue, "r")
    assert info is not None and info.due_ms == clock.now


def test_a_time_not_after_now_runs_now(queue: Queue, clock: FakeClock) -> None:
    past = queue.submit([1], request_id="past", handler="echo", run_at=at(clock, -60_000))
    zero = queue.submit([1], request_id="zero", handler="echo", delay=0)
    assert (past.state, past.due_ms, zero.state, zero.due_ms) == ("active", 0, "active", 0)
    assert len(queue.dequeue("w", 10)) == 2


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"delay": -1}, "zero or more"),
    ({"delay": float("nan")}, "zero or more"),
    ({"delay": "10m"}, "seconds"),
    ({"delay": 11 * 366 * 86_400}, "ten years"),
    ({"run_at": datetime(2030, 1, 1)}, "no time zone"),
    ({"run_at": 1_800_000_000}, "timezone-aware datetime"),
    ({"run_at": datetime(2030, 1, 1, tzinfo=UTC), "delay": 5}, "not both"),
])
def test_bad_due_times_are_refused_before_anything_is_written(
    queue: Queue, redis_client: redis.Redis, kwargs: dict[str, object], says: str
) -> None:
    with pytest.raises(InvalidInput, match=says):
        queue.submit([1], request_id="r", handler="echo", **kwargs)  # type: ignore[arg-type]
    assert not redis_client.exists(queue.keys.request("r"))


def test_every_other_option_is_kept_and_priority_orders_due_requests(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1, 2, 3], request_id="low", handler="echo", priority=10, delay=5)
    queue.submit([1, 2, 3], request_id="high", handler="echo", priority=90, delay=5,
                 concurrency=1, tenant="acme", max_attempts=1)
    info = read.request(queue, "high")
    assert info is not None and (info.priority, info.concurrency, info.tenant,
                                 info.max_attempts) == (90, 1, "acme", 1)
    clock.advance(5_000)
    first = queue.dequeue("w", 3)
    # The high one first, one at a time (its concurrency), then the low one.
    assert [lease.request_id for lease in first] == ["high", "low", "low"]
    [failed] = [lease for lease in first if lease.request_id == "high"]
    assert queue.fail(failed, "boom").outcome == "dead"  # max_attempts 1 kept


def test_due_requests_share_by_tenant_as_any_others(queue: Queue, clock: FakeClock) -> None:
    for i in range(3):
        queue.submit([1, 2], request_id=f"a{i}", handler="echo", tenant="a", delay=1)
    queue.submit([1, 2], request_id="b0", handler="echo", tenant="b", delay=1)
    clock.advance(1_000)
    order = [queue.dequeue("w", 1)[0].request_id for _ in range(4)]
    # Tenants take turns (b is served second, not after a's six tasks), then a's requests.
    assert order == ["a0", "b0", "a1", "b0"]


def test_a_due_higher_priority_request_is_never_passed_over_however_many_are_due(
    queue: Queue, clock: FakeClock
) -> None:
    # More low-priority requests due than one call promotes, and one high that is due last.
    for i in range(450):
        queue.submit([i], request_id=f"low{i}", handler="echo", priority=10, delay=1)
    queue.submit(["hi"], request_id="hi", handler="echo", priority=90, delay=2)
    queue.submit(["now"], request_id="now", handler="echo", priority=50)
    clock.advance(2_000)
    got = queue.dequeue("w", 2)
    assert [lease.request_id for lease in got] == ["hi", "now"]
    # The rest become due over the next calls, none lost.
    seen = {lease.request_id for lease in got}
    while leases := queue.dequeue("w", 100):
        seen |= {lease.request_id for lease in leases}
    assert len(seen) == 452


def test_cancel_while_scheduled_runs_nothing(
    queue: Queue, clock: FakeClock, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2, 3], request_id="r", handler="echo", delay=60)
    before = read.stats(queue)
    assert (before.scheduled, before.waiting, before.requests_by_state["scheduled"]) == (1, 0, 1)
    result = queue.cancel("r")
    assert (result.state, result.dropped, result.running, result.changed) == ("cancelled", 3, 0,
                                                                              True)
    clock.advance(120_000)
    assert queue.dequeue("w", 10) == []
    info = read.request(queue, "r")
    assert info is not None and (info.cancelled, info.waiting) == (3, 0)
    after = read.stats(queue)
    assert (after.scheduled, after.waiting, after.delayed) == (0, 0, 0)
    assert read.drained(queue)
    assert not redis_client.exists(queue.keys.delayed)  # the next call tidied its mark away


def test_stats_count_scheduled_requests_and_those_due_within_the_hour(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1], request_id="soon", handler="echo", delay=60)
    queue.submit([1], request_id="later", handler="echo", delay=7_200)
    queue.submit([1], request_id="now", handler="echo")
    s = read.stats(queue)
    assert (s.scheduled, s.due_next_hour, s.waiting, s.delayed) == (2, 1, 1, 0)
    assert s.requests_by_state["scheduled"] == 2 and s.as_dict()["scheduled"] == 2
    assert read.due_within(queue, 3 * 3_600_000) == 2
    assert not read.drained(queue)
    page = read.scheduled(queue, limit=1)
    assert [r.id for r in page.items] == ["soon"] and page.cursor is not None
    page2 = read.scheduled(queue, after=page.cursor, limit=1)
    assert [r.id for r in page2.items] == ["later"] and page2.cursor is None
    assert page2.items[0].due_ms == clock.now + 7_200_000


def test_run_now_makes_it_due_at_once_and_only_once(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1], request_id="r", handler="echo", delay=3_600)
    assert queue.run_now("r") == ("active", True)
    assert queue.run_now("r") == ("active", False)
    [lease] = queue.dequeue("w", 1)
    assert lease.request_id == "r"
    assert read.stats(queue).scheduled == 0
    with pytest.raises(UnknownRequest):
        queue.run_now("nosuch")


def test_an_open_delayed_request_takes_tasks_and_a_seal_until_due(
    queue: Queue, clock: FakeClock
) -> None:
    sub = queue.open(handler="echo", request_id="r", delay=30)
    assert sub.state == "scheduled"
    assert queue.add("r", [1, 2]) == 2
    assert queue.dequeue("w", 10) == []
    assert read.stats(queue).waiting == 0  # counted once due
    assert queue.seal("r") == "scheduled"
    clock.advance(30_000)
    got = queue.dequeue("w", 10)
    assert len(got) == 2 and queue.state("r") == "active"  # sealed: active, not open
    queue.ack_many(got)
    assert queue.wait("r", timeout=1) == "done"


def test_an_unsealed_delayed_request_is_open_once_due(queue: Queue, clock: FakeClock) -> None:
    queue.open(handler="echo", request_id="r", delay=1)
    queue.add("r", [1])
    clock.advance(1_000)
    [lease] = queue.dequeue("w", 10)
    assert queue.state("r") == "open"
    queue.add("r", [2])
    queue.ack(lease)
    assert queue.seal("r") == "active"


def test_resubmitting_a_scheduled_id_changes_nothing(queue: Queue, clock: FakeClock) -> None:
    first = queue.submit([1], request_id="r", handler="echo", delay=60)
    again = queue.submit([1], request_id="r", handler="echo", delay=5)
    assert (again.created, again.state, again.due_ms) == (False, "scheduled", first.due_ms)


def test_a_new_earliest_due_time_wakes_an_idle_worker(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1], request_id="late", handler="echo", delay=600)
    redis_client.delete(queue.keys.wake)
    queue.submit([1], request_id="later", handler="echo", delay=900)
    assert redis_client.llen(queue.keys.wake) == 0  # not the new head: nobody to wake
    queue.submit([1], request_id="sooner", handler="echo", delay=5)
    assert redis_client.llen(queue.keys.wake) == 1
    assert queue.ack_and_dequeue("w", 1)[2] == 5_000


def test_nothing_scheduled_costs_the_hot_path_nothing(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1], request_id="r", handler="echo")
    queue.ack(queue.dequeue("w", 1)[0])
    # No key of the delayed-request indexes appears unless a request is delayed.
    for key in (queue.keys.scheduled, queue.keys.delayed, queue.keys.base + "sprio"):
        assert not redis_client.exists(key)


@pytest.mark.parametrize(("text", "seconds"), [
    ("10m", 600), ("90s", 90), ("1h30m", 5400), ("2d", 172_800), ("250ms", 0.25), ("45", 45),
    ("1.5h", 5400), ("1w", 604_800),
])
def test_delays_as_people_write_them(text: str, seconds: float) -> None:
    assert parse_delay(text) == seconds


@pytest.mark.parametrize("text", ["", "-5m", "10 parsecs", "m10", "1h-3m", "soon"])
def test_unreadable_delays_say_what_to_write(text: str) -> None:
    with pytest.raises(InvalidInput, match="delay"):
        parse_delay(text)


def test_times_need_an_offset() -> None:
    assert parse_at("2026-12-01T02:00+01:00") == datetime(2026, 12, 1, 1, tzinfo=UTC)
    assert parse_at("2026-12-01T01:00Z") == datetime(2026, 12, 1, 1, tzinfo=UTC)
    with pytest.raises(InvalidInput, match="no offset"):
        parse_at("2026-12-01T02:00")
    with pytest.raises(InvalidInput, match="ISO 8601"):
        parse_at("tomorrow")

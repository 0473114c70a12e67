"""Per-handler metrics in the database (issue 20): the mirror rolls the engine's minutes into
minute rows, hour rows and totals, idempotently (old rows are pruned by retention:
tests/mirror/test_retention_prune.py). A worker's runs arrive
there timed. Real redis-server and database (SQLite, or PostgreSQL with TEST_POSTGRES_URL)."""

from __future__ import annotations

import time

import pytest
import redis

from core.mirror.metrics import at_minute, counts_of, roll
from core.models import HandlerHour, HandlerMinute, HandlerTotal, MetricsCursor
from core.queue import Queue
from core.queue.metrics import bucket_of, minute_of
from core.worker import Registry, TaskContext, Worker, WorkerConfig
from tests.conftest import FakeClock

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]


def run(q: Queue, handler: str, n: int, seconds: float, *, fail: bool = False) -> None:
    q.submit([0] * n, handler=handler, max_attempts=1, lease_ms=600_000)
    leases = q.dequeue("w", n)
    if fail:
        for lease in leases:
            q.fail(lease, "boom", duration=seconds)
    else:
        q.ack_many(leases, durations=[seconds] * n)


def total(q: Queue, handler: str) -> tuple[int, int, int, int]:
    row = HandlerTotal.objects.get(queue=q.name, handler=handler)
    return row.done, row.failed, row.retried, sum(row.buckets)


def test_a_roll_stores_minutes_hours_and_totals(queue: Queue, clock: FakeClock) -> None:
    run(queue, "resize", 3, 0.02)
    run(queue, "resize", 1, 4.0, fail=True)
    run(queue, "mail", 2, 0.3)
    assert roll(queue) == 2

    minute = HandlerMinute.objects.get(queue="q", handler="resize")
    assert minute.minute == at_minute(minute_of(clock.now))
    c = counts_of(minute)
    assert (c.done, c.failed, c.retried, c.runs) == (3, 1, 0, 3)
    assert c.buckets[bucket_of(0.02)] == 3 and sum(c.buckets) == 3
    assert (c.run_us, c.fail_us) == (3 * 20_000, 4_000_000)
    hour = HandlerHour.objects.get(queue="q", handler="resize")
    assert hour.hour == minute.minute.replace(minute=0)
    assert counts_of(hour) == c
    assert total(queue, "resize") == (3, 1, 0, 3)
    assert total(queue, "mail") == (2, 0, 0, 2)
    assert MetricsCursor.objects.get(queue="q").minute == minute_of(clock.now)


def test_reading_a_minute_again_counts_nothing_twice(queue: Queue, clock: FakeClock) -> None:
    run(queue, "h", 2, 0.01)
    roll(queue)
    assert roll(queue) == 0  # the same minute again: nothing new
    run(queue, "h", 3, 0.01)  # the minute goes on
    assert roll(queue) == 1
    assert counts_of(HandlerMinute.objects.get(handler="h")).done == 5
    assert total(queue, "h")[0] == 5
    # A mirror that crashed before its commit, or lost its cursor, reads them all again.
    MetricsCursor.objects.all().delete()
    assert roll(queue) == 0
    assert total(queue, "h")[0] == 5
    assert HandlerHour.objects.get(handler="h").done == 5


def test_minutes_of_one_hour_add_up_and_the_cursor_moves(queue: Queue, clock: FakeClock) -> None:
    clock.now = 1_700_000_400_000 - 1_700_000_400_000 % 3_600_000  # an hour's start
    run(queue, "h", 1, 0.01)
    roll(queue)
    clock.advance(60_000)
    run(queue, "h", 2, 0.01)
    clock.advance(60_000)
    roll(queue)  # reads the minute before (it was current at the last roll) and this one
    assert HandlerMinute.objects.filter(handler="h").count() == 2
    assert HandlerHour.objects.get(handler="h").done == 3
    assert MetricsCursor.objects.get(queue="q").minute == minute_of(clock.now)
    clock.advance(3_600_000)
    run(queue, "h", 4, 0.01)
    roll(queue)
    assert sorted(HandlerHour.objects.values_list("done", flat=True)) == [3, 4]
    assert total(queue, "h")[0] == 7


def test_a_lost_minute_key_counts_afresh_without_going_down(
    queue: Queue, redis_client: redis.Redis, clock: FakeClock
) -> None:
    run(queue, "h", 5, 0.01)
    roll(queue)
    redis_client.delete(queue.keys.metrics(minute_of(clock.now)))  # a restart without AOF
    run(queue, "h", 2, 0.01)
    roll(queue)
    assert total(queue, "h")[0] == 7
    assert HandlerMinute.objects.get(handler="h").done == 7


def test_a_workers_runs_are_timed_and_rolled(live_queue: Queue) -> None:
    registry = Registry()

    @registry.handler("nap")
    def nap(payload: float, ctx: TaskContext) -> None:
        time.sleep(payload)

    @registry.handler("broken")
    def broken(payload: object, ctx: TaskContext) -> None:
        raise ValueError("no")

    live_queue.submit([0.05] * 4, handler="nap")
    live_queue.submit([0] * 2, handler="broken", max_attempts=1)
    worker = Worker([live_queue], WorkerConfig(burst=True, heartbeat="thread", idle_wait=0.1),
                    registry)
    assert worker.run() == 0
    roll(live_queue)
    naps = HandlerTotal.objects.get(queue="q", handler="nap")
    c = counts_of(naps)
    assert (c.done, c.failed, c.runs) == (4, 0, 4)
    assert 0.05 <= c.quantile(0.5) <= 0.1  # type: ignore[operator]
    assert c.buckets[bucket_of(0.06)] >= 3  # (50, 100] ms
    assert total(live_queue, "broken") == (0, 2, 0, 0)
    assert HandlerTotal.objects.get(handler="broken").fail_us > 0

"""Per-handler metrics (issue 20): the engine counts done, dead-lettered and retried tasks and
a run-time histogram per handler and minute, in the same function call as the ack or fail;
a refused ack or fail counts nothing. On the suite's real redis-server, no Django."""

from __future__ import annotations

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from core.queue import InvalidInput, LeaseLost, Queue, RedisUnavailable, read
from core.queue.metrics import (
    BUCKETS_MS,
    KEEP_MS,
    NBUCKETS,
    HandlerCounts,
    Tally,
    bucket_of,
    merged,
    minute_of,
    parse_tally,
    token,
)
from tests.conftest import FakeClock

pytestmark = pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning")


def minute(q: Queue, at: int | None = None) -> dict[str, HandlerCounts]:
    m = minute_of(q.now_ms() if at is None else at)
    return read.handler_metrics(q, m, m).get(m, {})


def test_acks_count_done_and_run_times_per_handler(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1, 2, 3], request_id="a", handler="resize")
    queue.submit([1, 2], request_id="b", handler="resize")
    queue.submit([1], request_id="c", handler="mail")
    leases = queue.dequeue("w", 10)
    by_rid = {lease.request_id: lease for lease in leases}
    durations = [0.0004 if lease.handler == "resize" else 2.0 for lease in leases]
    accepted, _, _ = queue.ack_and_dequeue("w", 0, [x.lease for x in leases],
                                           durations=durations)
    assert all(accepted) and set(by_rid) == {"a", "b", "c"}

    got = minute(queue)
    assert set(got) == {"resize", "mail"}
    resize, mail = got["resize"], got["mail"]
    assert (resize.done, resize.failed, resize.retried, resize.runs) == (5, 0, 0, 5)
    assert resize.buckets[0] == 5 and resize.run_us == 5 * 400
    assert (mail.done, mail.runs, mail.run_us) == (1, 1, 2_000_000)
    assert mail.buckets[bucket_of(2.0)] == 1 and BUCKETS_MS[bucket_of(2.0)] == 2_500
    # The key is the queue's, for this minute, and expires a day after it was made.
    key = queue.keys.metrics(minute_of(clock.now))
    assert key == f"{queue.keys.prefix}:{{q}}:metrics:{clock.now // 60_000}"
    assert KEEP_MS - 5_000 < queue.redis.pttl(key) <= KEEP_MS


def test_a_refused_ack_counts_nothing(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1, 2], request_id="a", handler="h")
    first, second = queue.dequeue("w", 2)
    queue.ack(first, duration=0.01)
    with pytest.raises(LeaseLost):
        queue.ack(first, duration=0.01)  # acked already
    clock.advance(first.lease_ms + 1)  # the second lease expires
    assert queue.ack_many([second], durations=[0.01]) == [False]
    counts = minute(queue)["h"]
    assert (counts.done, counts.runs) == (1, 1)


def test_fails_count_retried_and_dead_with_their_run_time(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1, 2], request_id="a", handler="h", max_attempts=2)
    x, y = queue.dequeue("w", 2)
    assert queue.fail(x, "boom", duration=0.03).outcome in ("delayed", "waiting")
    assert queue.fail(y, "bad input", retry=False, duration=0.2).outcome == "dead"
    with pytest.raises(LeaseLost):
        queue.fail(y, "again", duration=0.2)  # refused: counts nothing
    counts = minute(queue)["h"]
    assert (counts.done, counts.retried, counts.failed) == (0, 1, 1)
    # Their time is time spent; the histogram is the runs done's.
    assert (counts.fail_us, counts.time_us, counts.runs, counts.run_us) == (230_000, 230_000, 0, 0)
    assert counts.failure_rate == 1.0


def test_a_fail_of_a_cancelled_request_is_not_a_failure(queue: Queue) -> None:
    queue.submit([1], request_id="a", handler="h")
    [lease] = queue.dequeue("w", 1)
    queue.cancel("a")
    assert queue.fail(lease, "stopped", duration=1.0).outcome == "cancelled"
    assert minute(queue) == {}


def test_the_reaper_counts_its_dead_letters(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1], request_id="a", handler="h", max_attempts=1)
    [lease] = queue.dequeue("w", 1)
    clock.advance(lease.lease_ms + 1)
    assert [r.outcome for r in queue.reap()] == ["dead"]
    counts = minute(queue)["h"]
    assert (counts.failed, counts.runs) == (1, 0)  # not timed: the run's end is unknown


def test_untimed_acks_count_done_outside_the_histogram(queue: Queue) -> None:
    queue.submit([1, 2], request_id="a", handler="h")
    queue.ack_many(queue.dequeue("w", 2))
    counts = minute(queue)["h"]
    assert (counts.done, counts.runs, counts.quantile(0.5)) == (2, 0, None)


def test_minutes_are_kept_apart(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1, 2], request_id="a", handler="h", lease_ms=120_000)
    x, y = queue.dequeue("w", 2)
    queue.ack(x, duration=0.001)
    first = minute_of(clock.now)
    clock.advance(60_000)
    queue.ack(y, duration=0.001)
    got = read.handler_metrics(queue, first - 5)
    assert sorted(got) == [first, first + 1]
    assert [got[m]["h"].done for m in sorted(got)] == [1, 1]


def test_a_queue_with_metrics_off_counts_nothing(
    redis_client: redis.Redis, prefix: str, clock: FakeClock
) -> None:
    q = Queue(redis_client, "q", prefix=prefix, clock=clock, metrics=False)
    q.submit([1, 2, 3], request_id="a", handler="h", max_attempts=1)
    x, y, z = q.dequeue("w", 3)
    q.ack(x, duration=0.5)
    q.fail(y, "boom", duration=0.5)
    clock.advance(z.lease_ms + 1)
    q.reap()
    assert redis_client.exists(q.keys.metrics(minute_of(clock.now))) == 0
    assert read.stats(q).totals["done"] == 1  # the queue itself counted as ever


def test_a_batch_costs_a_few_commands_whatever_its_size(
    redis_client: redis.Redis, queue: Queue
) -> None:
    """One HINCRBY per handler and field per call (and a PEXPIRE when the minute's key is
    new), not one per task: the cost budget is 2 us of Redis per task."""

    def hincrbys(n: int) -> int:
        queue.submit([0] * n, handler="h")
        leases = queue.dequeue("w", n)
        before = redis_client.info("commandstats").get("cmdstat_hincrby", {}).get("calls", 0)
        queue.ack_many(leases, durations=[0.0001] * n)
        after = redis_client.info("commandstats")["cmdstat_hincrby"]["calls"]
        return int(after) - int(before)

    hincrbys(1)  # the stats fields and the minute's key exist from here on
    # stats "done" + the handler's bucket and summed time: 3 for 1 task or 500.
    assert hincrbys(1) == hincrbys(500) == 3


def test_a_workers_tally_sends_its_accepted_acks_about_once_a_second(
    redis_client: redis.Redis, queue: Queue
) -> None:
    """The worker's hot path: one-task acks carry no timing; the accepted ones are counted
    in the worker's Tally and sent with a later call once they have waited flush_s. A
    one-task ack then costs no metrics write (the budget is 2 us of Redis per task)."""
    tally = Tally(flush_s=3600)  # nothing is due in this test until forced
    queue.submit([1, 2, 3], request_id="a", handler="h")
    queue.submit([1], request_id="b", handler="g")

    def hincrbys() -> int:
        return int(redis_client.info("commandstats").get("cmdstat_hincrby", {}).get("calls", 0))

    leases = queue.dequeue("w", 4)
    queue.ack_and_dequeue("w", 0, [leases[0].lease], durations=[0.0001], tally=tally,
                          handlers=[leases[0].handler])  # the stats field exists from here on
    before = hincrbys()
    for lease in leases[1:]:
        accepted, _, _ = queue.ack_and_dequeue("w", 0, [lease.lease], durations=[0.3],
                                               tally=tally, handlers=[lease.handler])
        assert accepted == [True]
    assert hincrbys() - before == 3  # the stats' "done" per call, nothing for the metrics
    assert minute(queue) == {}
    # A refused ack (acked already) is not counted.
    assert queue.ack_and_dequeue("w", 0, [leases[1].lease], durations=[0.3], tally=tally,
                                 handlers=[leases[1].handler])[0] == [False]

    queue.send_tally(tally, force=True)
    got = minute(queue)
    assert (got["h"].done, got["h"].runs, got["h"].run_us) == (3, 3, 100 + 2 * 300_000)
    assert got["h"].buckets[0] == 1 and got["h"].buckets[bucket_of(0.3)] == 2
    assert (got["g"].done, got["g"].run_us) == (1, 300_000)
    assert tally.take() == ""  # sent: nothing is counted twice


def test_a_due_tally_rides_on_the_next_call_and_survives_a_failed_one(
    queue: Queue, prefix: str, clock: FakeClock
) -> None:
    tally = Tally(flush_s=0)  # due as soon as counted
    queue.submit([1, 2], request_id="a", handler="h")
    x, y = queue.dequeue("w", 2)
    queue.ack_and_dequeue("w", 0, [x.lease], durations=[None], tally=tally, handlers=["h"])
    assert minute(queue) == {}  # counted after the call that acked it...
    queue.ack_and_dequeue("w", 0, [y.lease], durations=[0.002], tally=tally, handlers=["h"])
    assert (minute(queue)["h"].done, minute(queue)["h"].runs) == (1, 0)  # ...sent with the next
    # A call that fails keeps the counts for the one after.
    nothing = redis.Redis(port=1, decode_responses=True, retry=Retry(NoBackoff(), 0))
    broken = Queue(nothing, "q", prefix=prefix, clock=clock)
    with pytest.raises(RedisUnavailable):
        broken.ack_and_dequeue("w", 1, [], durations=[], tally=tally, handlers=[])
    queue.ack_and_dequeue("w", 0, [], durations=[], tally=tally, handlers=[])
    assert (minute(queue)["h"].done, minute(queue)["h"].runs) == (2, 1)


def test_a_tally_must_match_its_acks_and_the_engine_skips_junk(
    redis_client: redis.Redis, queue: Queue
) -> None:
    with pytest.raises(InvalidInput, match="handlers and durations"):
        queue.ack_and_dequeue("w", 0, ["a/1-0/1"], durations=[0.1], tally=Tally(), handlers=[])
    with pytest.raises(ValueError, match="not a tally field"):
        parse_tally("h|x 1")
    assert parse_tally("h|3 2 h|us 40 h|d 1") == [("h|3", 2), ("h|us", 40), ("h|d", 1)]
    # A hand-made call: only well-formed done fields are added; nothing else is written.
    queue._run("dequeue", [queue.now_ms(), "w", 0, 0, 0, "",
                           "h|2 5 h|us 10 h|f 9 h|../x 1 h|d x |3 1 h|d 2"])
    got = minute(queue)
    assert set(got) == {"h"}
    assert (got["h"].done, got["h"].runs, got["h"].failed, got["h"].run_us) == (7, 5, 0, 10)


def test_timing_tokens_and_buckets() -> None:
    assert token(None) == "-"
    assert token(0.001) == "0:1000"  # le: 1 ms is in the first bucket
    assert token(0.0011) == "1:1100"
    assert token(-1) == "0:0"
    assert bucket_of(10_000) == NBUCKETS - 1  # past the last bound: +Inf


def test_quantiles_interpolate_within_buckets_and_merge() -> None:
    a = HandlerCounts(done=100)
    a.buckets[bucket_of(0.02)] = 100  # 100 runs in (10, 25] ms
    b = HandlerCounts(done=100)
    b.buckets[bucket_of(3.0)] = 100  # 100 runs in (2.5, 5] s
    assert a.quantile(0.5) == pytest.approx(0.0175)
    both = merged([a, b])
    assert both.done == 200 and both.runs == 200
    assert both.quantile(0.5) == pytest.approx(0.025)  # the top of the lower bucket
    assert both.quantile(0.99) == pytest.approx(2.5 + 2.5 * 0.98)
    slow = HandlerCounts()
    slow.buckets[-1] = 1
    assert slow.quantile(0.5) == BUCKETS_MS[-1] / 1000


def test_reading_is_bounded(queue: Queue) -> None:
    from core.queue import InvalidInput

    with pytest.raises(InvalidInput):
        read.handler_metrics(queue, 0, 10_000)

"""The mirror (issue 7, durable history): events and dead letters applied to the database
idempotently, gaps reconciled from the state indexes, `events` trimmed behind every group,
counter samples; on SQLite, and on PostgreSQL when TEST_POSTGRES_URL is set."""

from __future__ import annotations

import io
import logging
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from core.management.commands import runmirror
from core.mirror import MirrorConfig, Totals, apply, commit, run_mirror
from core.mirror.apply import apply_batch
from core.mirror.run import Follower
from core.mirror.samples import prune, sample
from core.models import DeadLetter, QueueSample, Request
from core.queue import Queue
from core.queue.follow import Batch, Streams, sid
from core.queue.read.lag import events_lag
from tests.conftest import FakeClock
from tests.mirror_support import assert_db_equals_redis, finish, mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]


def submit(q: Queue, rid: str, n: int = 2, **options: Any) -> None:
    q.submit(list(range(n)), request_id=rid, handler="h", **options)


def test_requests_are_mirrored_with_their_state_and_counters(queue: Queue) -> None:
    submit(queue, "a", 3, priority=70, tenant="acme", concurrency=5)
    submit(queue, "b", 2)
    finish(queue)
    submit(queue, "c", 1)

    totals = mirror(queue)

    assert_db_equals_redis(queue)
    a = Request.objects.get(queue="q", request_id="a")
    assert (a.state, a.done, a.total, a.priority, a.tenant, a.concurrency) == (
        "done", 3, 3, 70, "acme", 5)
    assert a.completions == 1
    assert a.finished_at is not None and a.expired_at is None
    assert Request.objects.get(request_id="c").state == "active"
    assert totals.events == 5  # three submitted, two completed


def test_replaying_every_event_twice_changes_nothing(queue: Queue, redis_client: Any) -> None:
    submit(queue, "a", 3)
    submit(queue, "b", 1)
    finish(queue, fail=True)
    queue.requeue_request("a")
    finish(queue)
    events = redis_client.xrange(queue.keys.events)
    dead = redis_client.xrange(queue.keys.dead)
    apply_batch(queue, events, dead)

    def snapshot() -> tuple[list[Any], list[Any]]:
        return (list(Request.objects.order_by("request_id").values()),
                list(DeadLetter.objects.order_by("entry_id").values()))

    first = snapshot()
    apply_batch(queue, events, dead)  # the same batch again: a crash after commit, before ack
    apply_batch(queue, events[:3], [])  # and part of it, as a later replay would
    assert snapshot() == first
    a = Request.objects.get(request_id="a")
    assert (a.state, a.done, a.dead, a.completions) == ("done", 3, 0, 2)  # failed, then done


def test_a_mirror_that_dies_after_commit_before_ack_reads_the_batch_again(
    queue: Queue, redis_client: Any
) -> None:
    for i in range(5):
        submit(queue, f"r{i}")
    finish(queue)
    streams = Streams(queue, group="mirror")
    streams.setup()
    batch = streams.read()
    apply_batch(queue, batch.events, batch.dead)  # committed, never acknowledged

    again = mirror(queue)  # a new process: its pending entries first

    assert again.events == 10
    assert Request.objects.filter(queue="q").count() == 5
    assert set(Request.objects.values_list("completions", flat=True)) == {1}
    assert redis_client.xpending(queue.keys.events, "mirror")["pending"] == 0


def read_by_consumer_a(queue: Queue, *, requests: int, batch: int) -> tuple[Follower, Batch]:
    """`requests` requests submitted and finished, then the first batch of new entries that
    consumer "a" of the mirror group reads with --batch `batch`: (a, that batch)."""
    for i in range(requests):
        submit(queue, f"r{i}")
    finish(queue)
    a = Follower(queue, MirrorConfig(queues=("q",), consumer="a", batch=batch))
    a.streams.setup()
    a.streams.read()  # its own pending entries first: none
    return a, a.streams.read()


def test_what_a_consumer_killed_after_its_commit_left_pending_is_taken_over_by_another(
    queue: Queue, redis_client: Any
) -> None:
    """Another mirror process of the group acknowledges it (the database has it): left pending
    with the dead consumer, the group would stay behind for good (a flake of
    test_mirror_processes on PostgreSQL: `a` frozen between its commit and its ack)."""
    a, read = read_by_consumer_a(queue, requests=5, batch=4)
    apply.commit(queue, apply.prepare(queue, read.events, read.dead),
                 guard=commit.guard(a.streams, read))  # then killed: never acknowledged
    assert commit.position("q") == read.events[-1][0]
    b = Follower(queue, MirrorConfig(queues=("q",), consumer="b", claim_after_s=0.05))
    time.sleep(0.1)  # a's entries idle for longer than claim_after_s

    totals = Totals()
    while b.step(totals):
        pass

    assert events_lag(queue).behind == 0
    assert totals.requests == 5  # 4 submitted were a's, then 5 finished: none applied again
    assert totals.events == 6  # what a committed is acknowledged, not counted as applied
    assert_db_equals_redis(queue)
    assert set(Request.objects.values_list("completions", flat=True)) == {1}


def test_a_consumer_killed_holding_more_than_one_claims_worth_is_taken_over(
    queue: Queue, redis_client: Any
) -> None:
    """A consumer that dies may hold more entries than the one taking over claims at a time
    (its --batch larger). Was: the taker claimed its batch's worth again and again from the
    same place, waiting behind the rest for good."""
    _, held = read_by_consumer_a(queue, requests=8, batch=8)  # then killed, before its commit
    assert len(held.events) == 8
    stop = threading.Event()
    b = Follower(queue, MirrorConfig(queues=("q",), consumer="b", batch=4, claim_after_s=0.05),
                 stop)
    # Its look for others' pending entries between batches not due yet: b reads new entries,
    # finds a's before them, and claims them while it waits for its turn.
    b.next_claim = time.monotonic() + 60
    time.sleep(0.1)  # a's entries idle for longer than claim_after_s

    totals = Totals()
    timer = threading.Timer(10, stop.set)  # a b still waiting then returns, its batch pending
    timer.start()
    try:
        while b.step(totals):
            pass
    finally:
        timer.cancel()
    assert totals.events == 16, "b waited behind what a held"  # 8 submitted, 8 completed

    assert events_lag(queue).behind == 0
    assert redis_client.xpending(queue.keys.events, "mirror")["pending"] == 0
    assert_db_equals_redis(queue)
    assert set(Request.objects.values_list("completions", flat=True)) == {1}


def test_dead_letters_get_a_row_each_with_their_fingerprint(queue: Queue) -> None:
    submit(queue, "a", 3, tenant="t1")
    finish(queue, fail=True)

    mirror(queue)

    rows = list(DeadLetter.objects.filter(queue="q").order_by("entry_id"))
    assert len(rows) == 3
    assert {r.exception for r in rows} == {"ValueError"}
    assert {r.pattern for r in rows} == {"bad row <n> in '<str>'"}
    assert len({r.fingerprint for r in rows}) == 1  # different numbers, one group
    assert {(r.request_id, r.handler, r.tenant, r.attempts) for r in rows} == {("a", "h", "t1", 1)}
    assert rows[0].error.startswith("ValueError: bad row ")
    assert Request.objects.get(request_id="a").state == "failed"


def test_requeued_dead_letters_are_marked_resolved(queue: Queue) -> None:
    submit(queue, "a", 2)
    submit(queue, "b", 1)
    finish(queue, fail=True)
    mirror(queue)
    first = DeadLetter.objects.filter(request_id="a").order_by("entry_id").first()
    assert first is not None

    queue.requeue([first.entry_id])
    mirror(queue)

    got = dict(DeadLetter.objects.values_list("entry_id", "resolution"))
    assert got[first.entry_id] == "requeued"
    assert sorted(got.values()) == ["", "", "requeued"]
    first.refresh_from_db()
    assert first.resolved_at is not None
    assert Request.objects.get(request_id="a").state == "active"  # reopened


def test_a_letter_requeued_in_the_same_batch_it_died_in_is_resolved(queue: Queue) -> None:
    submit(queue, "a", 2)
    finish(queue, fail=True)
    queue.requeue_request("a")  # before the mirror saw either letter
    finish(queue)

    mirror(queue)

    assert not DeadLetter.objects.filter(resolution="").exists()
    assert Request.objects.get(request_id="a").state == "done"


def test_an_expired_request_keeps_its_row_and_gets_expired_at(
    queue: Queue, redis_client: Any
) -> None:
    submit(queue, "a", 2)
    mirror(queue)
    finish(queue)
    redis_client.delete(queue.keys.request("a"))  # its retention is over

    mirror(queue)

    a = Request.objects.get(request_id="a")
    assert (a.state, a.done, a.completions) == ("done", 2, 1)  # from the completed event
    assert a.expired_at is not None


def test_a_request_gone_before_the_mirror_saw_it_is_built_from_its_events(
    queue: Queue, redis_client: Any
) -> None:
    submit(queue, "a", 4, priority=80, tenant="acme")
    finish(queue)
    redis_client.delete(queue.keys.request("a"))

    mirror(queue)

    a = Request.objects.get(request_id="a")
    assert (a.state, a.total, a.done, a.priority, a.tenant) == ("done", 4, 4, 80, "acme")
    assert a.expired_at is not None


def test_events_are_trimmed_behind_the_slowest_group(queue: Queue, redis_client: Any) -> None:
    for i in range(300):
        submit(queue, f"r{i}", 1)
    redis_client.xgroup_create(queue.keys.events, "other", id="0")  # another database's mirror
    mirror(queue, batch=50)
    assert redis_client.xlen(queue.keys.events) == 300  # "other" has read nothing yet

    first = redis_client.xrange(queue.keys.events, count=1)[0][0]
    redis_client.xreadgroup("other", "o", {queue.keys.events: ">"}, count=200)
    redis_client.xack(queue.keys.events, "other",
                      *[e for e, _ in redis_client.xrange(queue.keys.events, count=150)])
    mirror(queue)

    left = redis_client.xrange(queue.keys.events)
    assert len(left) < 300
    # Nothing "other" has not acknowledged is gone: its 151st entry on are all there.
    unacked = redis_client.xpending(queue.keys.events, "other")["min"]
    assert sid(left[0][0]) <= sid(unacked)
    assert sid(left[0][0]) > sid(first)


def test_a_gap_is_reconciled_from_the_state_indexes_and_logged(
    queue: Queue, redis_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(30):
        submit(queue, f"r{i:02d}")
    mirror(queue)
    for i in range(30, 60):
        submit(queue, f"r{i:02d}")
    finish(queue)
    for i in range(60, 70):
        submit(queue, f"r{i:02d}")
    redis_client.xtrim(queue.keys.events, maxlen=5, approximate=False)  # past the mirror

    with caplog.at_level(logging.WARNING, "queueadmin.mirror"):
        totals = mirror(queue)

    assert_db_equals_redis(queue)
    assert totals.gaps == 1
    [line] = [r.getMessage() for r in caplog.records if "gap" in r.getMessage()]
    assert "queue=q" in line and "reconciled 70 requests" in line
    # Completions counted once, whether from the reconciliation or the events left.
    assert set(Request.objects.filter(state="done").values_list("completions", flat=True)) == {1}
    assert mirror(queue).gaps == 0  # reconciled once: the next run finds no gap


def test_a_new_mirror_on_a_trimmed_stream_reconciles(
    queue: Queue, redis_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(20):
        submit(queue, f"r{i}")
    finish(queue)
    redis_client.xtrim(queue.keys.events, maxlen=3, approximate=False)

    with caplog.at_level(logging.WARNING, "queueadmin.mirror"):
        totals = mirror(queue)

    assert totals.gaps == 1 and totals.reconciled == 20
    assert_db_equals_redis(queue)
    assert any("reconciled 20 requests" in r.getMessage() for r in caplog.records)


def test_an_untrimmed_stream_needs_no_reconciliation(queue: Queue) -> None:
    for i in range(20):
        submit(queue, f"r{i}")
    assert mirror(queue).gaps == 0
    assert_db_equals_redis(queue)


def test_running_requests_rows_follow_their_counters(queue: Queue) -> None:
    submit(queue, "a", 4)
    mirror(queue)
    leases = queue.dequeue("w", count=3)
    queue.ack_many(leases[:2])  # no event: counters move silently while it runs

    mirror(queue)  # the burst's housekeeping refreshes unfinished rows

    a = Request.objects.get(request_id="a")
    assert (a.state, a.done, a.leased, a.waiting) == ("active", 2, 1, 1)


def test_samples_record_the_counters_and_old_ones_are_pruned(
    queue: Queue, clock: FakeClock
) -> None:
    submit(queue, "a", 3)
    finish(queue, fail=False)
    submit(queue, "b", 2)

    s = sample(queue)
    assert (s.submitted, s.done, s.waiting, s.failed) == (5, 3, 2, 0)

    now = datetime.now(UTC)
    QueueSample.objects.create(queue="q", at=now - timedelta(days=9))
    QueueSample.objects.create(queue="other", at=now - timedelta(days=9))
    assert prune("q", now=now) == 1
    assert QueueSample.objects.count() == 2


def test_the_burst_takes_one_sample_per_queue(queue: Queue) -> None:
    submit(queue, "a")
    mirror(queue)
    assert QueueSample.objects.filter(queue="q").count() == 1


def test_pending_events_trimmed_before_they_were_applied_are_reconciled(
    queue: Queue, redis_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(10):
        submit(queue, f"r{i}")
    streams = Streams(queue, group="mirror")
    streams.setup()
    streams.read()  # read, then the process died before applying
    streams.read()
    redis_client.xtrim(queue.keys.events, maxlen=0, approximate=False)

    with caplog.at_level(logging.WARNING, "queueadmin.mirror"):
        totals = mirror(queue)

    assert totals.gaps == 1
    assert_db_equals_redis(queue)
    assert any("10 events it had read but not applied were deleted" in r.getMessage()
               for r in caplog.records)
    assert redis_client.xpending(queue.keys.events, "mirror")["pending"] == 0
    assert mirror(queue).gaps == 0


def test_a_dead_letter_requeued_between_its_read_and_its_ack_is_acknowledged(
    queue: Queue, redis_client: Any
) -> None:
    submit(queue, "a", 1)
    finish(queue, fail=True)
    streams = Streams(queue, group="mirror")
    streams.setup()
    streams.read()
    assert len(streams.read().dead) == 1  # read, then the process died before applying it
    queue.requeue_request("a")  # the letter leaves the dead stream
    finish(queue)

    mirror(queue)

    assert redis_client.xpending(queue.keys.dead, "mirror")["pending"] == 0
    assert not DeadLetter.objects.exists()
    assert Request.objects.get(request_id="a").state == "done"


def test_the_mirror_follows_queues_on_every_shard_of_a_cluster(redis_cluster: Any) -> None:
    from redis.cluster import ClusterNode
    from redis.cluster import RedisCluster as ClusterClient

    nodes = [ClusterNode(h, p) for h, p in redis_cluster.startup_nodes]
    client = ClusterClient(startup_nodes=nodes, decode_responses=True)
    try:
        prefix = "m" + uuid.uuid4().hex[:8]
        queues = [Queue(client, f"q{i}", prefix=prefix) for i in range(3)]
        assert len({client.keyslot(q.keys.events) for q in queues}) == 3
        for q in queues:
            submit(q, "a", 3)
            submit(q, "b", 1)
            finish(q, fail=q.name == "q1")
        redis_trim = client.xtrim(queues[2].keys.events, maxlen=1, approximate=False)
        assert redis_trim

        config = MirrorConfig(burst=True)  # no -q: every queue of the registry
        totals = run_mirror(config, lambda name: Queue(client, name, prefix=prefix))

        assert totals.queues == {"q0", "q1", "q2"} and totals.gaps == 1
        for q in queues:
            assert_db_equals_redis(q)
        assert DeadLetter.objects.filter(queue="q1").count() == 4
    finally:
        client.close()


def test_runmirror_command(django_queue: Queue) -> None:
    submit(django_queue, "a", 2)
    out = io.StringIO()

    call_command("runmirror", "--burst", stdout=out)

    assert "mirrored 1 events (1 request rows written), 0 dead letters from 1 queues" in (
        out.getvalue())
    assert Request.objects.filter(queue="default", request_id="a").exists()
    with pytest.raises(CommandError, match="--batch must be between"):
        call_command("runmirror", "--burst", "--batch", "0")
    assert MirrorConfig.batch == runmirror.BATCH  # the command's default is the mirror's
    with pytest.raises(CommandError, match=r"invalid queue name '\{x\}'"):
        call_command("runmirror", "--burst", "-q", "{x}")

"""Progress and log lines from a running task (Queue.progress, progress.lua): written only by
the holder of a live lease, bounded, read back by core.queue.read, and kept exactly as long as
the request."""

from __future__ import annotations

from dataclasses import replace

import pytest
import redis

from core.queue import InvalidInput, Queue, read
from core.queue.consume import LOG_LINES, MAX_LINE_CHARS, MAX_MESSAGE_CHARS
from tests.conftest import FakeClock

WEEK_MS = 7 * 86_400_000


def test_a_report_is_read_back_with_its_log_lines_and_the_servers_time(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1], request_id="r", handler="h")
    (lease,) = queue.dequeue("w1", 1)
    assert queue.progress(lease, done=3, total=10, message="rows 3 of 10", worker="w1",
                          lines=[(250, "opened the file"), (0, "read 3 rows")])
    (p,) = read.progress(queue, "r")
    assert (p.task_id, p.done, p.total, p.message, p.worker) == (
        lease.task_id, 3, 10, "rows 3 of 10", "w1")
    assert p.percent == 30.0 and p.running
    assert p.updated_ms == clock.now
    assert [(line.at_ms, line.text) for line in p.log] == [
        (clock.now - 250, "opened the file"), (clock.now, "read 3 rows")]
    clock.advance(1000)
    assert queue.progress(lease, done=4.5, total=10, worker="w1")  # lines stay
    (p,) = read.progress(queue, "r")
    assert (p.done, p.message, len(p.log), p.updated_ms) == (4.5, "", 2, clock.now)
    # By task, for the workers page (which knows its tasks run: not looked up).
    assert read.task_progress(queue, [("r", lease.task_id), ("r", "1-0")]) == {
        ("r", lease.task_id): replace(p, running=False)}


def test_a_run_whose_lease_is_gone_cannot_write(queue: Queue, clock: FakeClock) -> None:
    queue.submit([1, 2], request_id="r", handler="h", lease_ms=1000, max_attempts=5)
    (old, other) = queue.dequeue("w1", 2)
    assert queue.progress(old, done=1, total=2)
    clock.advance(900)
    queue.extend([other])  # `old` is let run out
    clock.advance(600)
    queue.reap()
    assert not queue.progress(old, done=2, total=2, lines=[(0, "stale")])  # reaped
    queue.ack(other)
    assert not queue.progress(other, done=9, total=9)  # acked
    (p,) = read.progress(queue, "r")
    assert (p.done, p.log, p.running) == (1, (), False)  # reaped: it waits to run again
    new = queue.dequeue("w2", 1)[0]
    assert new.task_id == old.task_id
    assert queue.progress(new, done=0, total=2, worker="w2")
    assert read.progress(queue, "r")[0].worker == "w2"


def test_text_is_capped_lines_are_the_last_ones_and_bad_numbers_are_refused(
    queue: Queue,
) -> None:
    queue.submit([1], request_id="r", handler="h")
    (lease,) = queue.dequeue("w", 1)
    queue.progress(lease, done=0, message="é" * 1000,
                   lines=[(0, f"line {i} " + "x" * 1000) for i in range(LOG_LINES + 5)])
    for i in range(7):
        queue.progress(lease, lines=[(0, f"more {i}")])
    (p,) = read.progress(queue, "r")
    assert p.message == "é" * (MAX_MESSAGE_CHARS - 1) + "\u2026"
    assert p.total is None and p.percent is None
    assert len(p.log) == LOG_LINES
    assert p.log[-1].text == "more 6"
    assert p.log[0].text.startswith(f"line {5 + 7} ") and len(p.log[0].text) == MAX_LINE_CHARS
    for bad in (-1, float("nan"), float("inf"), True, "3"):
        with pytest.raises(InvalidInput):
            queue.progress(lease, done=bad)  # type: ignore[arg-type]


def test_a_request_keeps_the_most_recently_written_tasks_only(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit(list(range(70)), request_id="r", handler="h", concurrency=70)
    leases = queue.dequeue("w", 70)
    for lease in leases:
        clock.advance(1)
        assert queue.progress(lease, done=1, total=1, lines=[(0, "hi")])
    shown = read.progress(queue, "r")
    assert len(shown) == 64
    assert [p.task_id for p in shown] == [x.task_id for x in reversed(leases[6:])]
    hash_fields = queue.redis.hlen(queue.keys.progress("r"))
    assert hash_fields == 2 * 64  # the dropped tasks' log lines went with them


def _progress_keys(client: redis.Redis, queue: Queue, rid: str) -> list[int]:
    return [client.pttl(k) for k in (queue.keys.progress(rid), queue.keys.progress_at(rid))]


def test_progress_expires_with_the_request_and_stays_while_a_requeue_reopens_it(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2], request_id="r", handler="h", retention_ms=60_000, max_attempts=1)
    a, b = queue.dequeue("w", 2)
    queue.progress(a, done=1, total=1)
    assert _progress_keys(redis_client, queue, "r") == [-1, -1]  # running: no expiry
    queue.ack(a)
    queue.fail(b, "boom")
    assert queue.state("r") == "failed"
    ttls = _progress_keys(redis_client, queue, "r")
    assert all(t > WEEK_MS - 60_000 for t in ttls), ttls  # as long as its hash
    assert queue.requeue_request("r") == 1
    assert _progress_keys(redis_client, queue, "r") == [-1, -1]
    queue.ack(queue.dequeue("w", 1)[0])
    assert queue.state("r") == "done"
    ttls = _progress_keys(redis_client, queue, "r")
    assert all(0 < t <= 60_000 for t in ttls), ttls
    assert redis_client.pttl(queue.keys.request("r")) <= 60_000


def test_a_request_without_progress_has_no_progress_keys(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1], request_id="r", handler="h")
    queue.ack(queue.dequeue("w", 1)[0])
    assert _progress_keys(redis_client, queue, "r") == [-2, -2]
    assert read.progress(queue, "r") == []
    assert "prog" not in redis_client.hgetall(queue.keys.request("r"))

"""Nothing is missed (issue 7): a mirror that was down catches up with 6,000 finished
requests (over 12,000 events: past the stream's old cap of 10,000), and a real `runmirror`
killed with SIGKILL mid-batch and restarted leaves no duplicate or missing row."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from core.queue import Queue
from core.stack.redis_server import RedisServer
from tests.mirror_support import (
    COMPARED,
    assert_db_equals_redis,
    db_rows,
    finish,
    mirror,
    process_env,
    redis_requests,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db,  # so `make test` runs them again on PostgreSQL
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]
ROOT = Path(__file__).resolve().parents[2]
# The catch-up's backlog: 12,000 events and more, past the old cap of the events stream
# (bench/bench_mirror.py measures the rate on 30,000).
N = 6_000


def submit_many(q: Queue, n: int, *, failing_every: int = 0) -> None:
    """n one-task requests; every `failing_every`-th one's task dead-lettered, the rest done."""
    for i in range(n):
        q.submit([i], request_id=f"r{i:06d}", handler="h", priority=i % 3 * 10,
                 tenant=f"t{i % 7}")
    while leases := q.dequeue("w", count=1000):
        ok = []
        for lease in leases:
            i = int(lease.request_id[1:]) if lease.request_id[1:].isdecimal() else 1
            if failing_every and i % failing_every == 0:
                q.fail(lease, f"KeyError: 'row {i}'", retry=False)
            else:
                ok.append(lease)
        q.ack_many(ok)


def test_a_mirror_down_while_6000_requests_finish_catches_up(
    queue: Queue, redis_client: Any
) -> None:
    queue.submit([0], request_id="before", handler="h")
    mirror(queue)  # the mirror ran once, then stopped: its group stays
    submit_many(queue, N, failing_every=100)
    assert redis_client.xlen(queue.keys.events) > 12_000  # more than the old cap of 10,000

    started = time.perf_counter()
    totals = mirror(queue)
    elapsed = time.perf_counter() - started

    assert totals.gaps == 0
    assert_db_equals_redis(queue)
    from core.models import DeadLetter, Request

    assert Request.objects.filter(queue="q").count() == N + 1
    assert Request.objects.filter(state="failed").count() == N // 100
    assert DeadLetter.objects.filter(queue="q").count() == N // 100
    assert DeadLetter.objects.values("fingerprint").distinct().count() == 1
    # Caught up, the stream is trimmed behind the group.
    assert redis_client.xlen(queue.keys.events) < 1000
    rate = N / elapsed
    print(f"\ncatch-up on {connection.vendor}: {N:,} requests ({totals.events} events) in "
          f"{elapsed:.1f}s = {rate:,.0f} requests/s")


# -- a real runmirror process, killed ------------------------------------------------------


def test_a_mirror_killed_mid_batch_and_restarted_leaves_no_duplicate_or_missing_row(
    live_queue: Queue, redis_client: Any, redis_server: RedisServer, prefix: str,
    tmp_path: Path, database_url: str, wait_until: Any
) -> None:
    n = 3_000  # a backlog of 30 batches: killed with most of it still to do
    submit_many(live_queue, n)
    env = process_env(database_url, tmp_path, redis_server.url, prefix)
    argv = [sys.executable, "manage.py", "runmirror", "-q", "q", "--batch", "100"]
    log = open(tmp_path / "mirror.log", "ab")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # Killed while it works through the backlog (some rows written, not all), with a
        # batch read and not acknowledged yet.
        wait_until(lambda: len(db_rows(database_url)) > 500 and redis_client.xpending(
            live_queue.keys.events, "mirror")["pending"], 60, "the mirror to be mid-batch")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        [group] = redis_client.xinfo_groups(live_queue.keys.events)
        last = redis_client.xinfo_stream(live_queue.keys.events)["last-generated-id"]
        assert group["pending"] or group["last-delivered-id"] != last, \
            "the mirror had finished before it was killed"
        more = 500  # and the queue moved on meanwhile
        for i in range(more):
            live_queue.submit([i], request_id=f"s{i:04d}", handler="h")
        finish(live_queue)
        done = subprocess.run([*argv, "--burst"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()

    rows = db_rows(database_url)
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)) == n + more  # no duplicate, none missing
    expected = redis_requests(live_queue)
    got = {r[0]: dict(zip(COMPARED, r[1:], strict=True)) for r in rows}
    assert got == expected


def test_runservices_mirrors_and_fires_schedules_in_one_process_and_stops_on_sigterm(
    live_queue: Queue, redis_server: RedisServer, prefix: str, tmp_path: Path,
    database_url: str, wait_until: Any
) -> None:
    """The stack's one process for the mirror, the bulk actions, the scheduler and the reaper:
    a schedule declared in Redis fires (the scheduler thread) and its request reaches the
    database (the mirror thread); a lease an operator revoked on a queue with no live worker
    moves on once its old lease has expired (the reaper thread); SIGTERM stops every thread
    and the process exits 0."""
    from core.queue import read
    from core.queue.schedule.api import declare, every

    live_queue.submit([1], request_id="before", handler="h")
    live_queue.submit([1], request_id="revoked", handler="h", priority=90)
    (lease,) = live_queue.ack_and_dequeue("gone", 1, lease_ms=1000)[1]
    assert live_queue.release_task("revoked", lease.task_id) == "gone"

    def moved_on() -> bool:
        info = read.request(live_queue, "revoked")
        return info is not None and (info.leased, info.waiting) == (0, 1)
    declare(live_queue, every("tick", 1, handler="h", tasks=[1]))
    env = process_env(database_url, tmp_path, redis_server.url, prefix)
    log = open(tmp_path / "services.log", "ab")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sys.executable, "manage.py", "runservices"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: {"before"} < {r[0] for r in db_rows(database_url)}
                   and any(r[0].startswith("sched.tick.") for r in db_rows(database_url)),
                   60, "a fired slot's request in the database")
        wait_until(moved_on, 10, "the revoked lease to move on with no worker alive")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
    threads = (tmp_path / "services.log").read_text()
    assert "Traceback" not in threads, threads

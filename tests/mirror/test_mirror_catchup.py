"""Nothing is missed (issue 7): a mirror that was down catches up with 30,000 finished
requests, and a real `runmirror` killed with SIGKILL mid-batch and restarted leaves no
duplicate or missing row."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from core.queue import Queue
from core.stack.redis_server import RedisServer
from tests.mirror_support import COMPARED, assert_db_equals_redis, finish, mirror, redis_requests

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db,  # so `make test` runs them again on PostgreSQL
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]
ROOT = Path(__file__).resolve().parents[2]


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


def test_a_mirror_down_while_30000_requests_finish_catches_up(
    queue: Queue, redis_client: Any
) -> None:
    queue.submit([0], request_id="before", handler="h")
    mirror(queue)  # the mirror ran once, then stopped: its group stays
    submit_many(queue, 30_000, failing_every=100)
    assert redis_client.xlen(queue.keys.events) > 60_000  # more than the old cap of 10,000

    started = time.perf_counter()
    totals = mirror(queue)
    elapsed = time.perf_counter() - started

    assert totals.gaps == 0
    assert_db_equals_redis(queue)
    from core.models import DeadLetter, Request

    assert Request.objects.filter(queue="q").count() == 30_001
    assert Request.objects.filter(state="failed").count() == 300
    assert DeadLetter.objects.filter(queue="q").count() == 300
    assert DeadLetter.objects.values("fingerprint").distinct().count() == 1
    # Caught up, the stream is trimmed behind the group.
    assert redis_client.xlen(queue.keys.events) < 1000
    rate = 30_000 / elapsed
    print(f"\ncatch-up on {connection.vendor}: 30,000 requests ({totals.events} events) in "
          f"{elapsed:.1f}s = {rate:,.0f} requests/s")


# -- a real runmirror process, killed ------------------------------------------------------


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """A database of its own for processes started by the test, migrated: a SQLite file, or a
    throwaway PostgreSQL database when the suite runs on PostgreSQL."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        import psycopg

        name = f"qa_mirror_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        base = url.rsplit("/", 1)[0]
        yield_url = f"{base}/{name}"
        try:
            _migrate(yield_url, tmp_path)
            yield yield_url
        finally:
            with psycopg.connect(url, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    else:
        db = f"sqlite:///{tmp_path / 'mirror.sqlite3'}"
        _migrate(db, tmp_path)
        yield db


def _env(
    database_url: str, tmp_path: Path, redis_url: str = "", prefix: str = ""
) -> dict[str, str]:
    return os.environ | {
        "DATABASE_URL": database_url, "DJANGO_SETTINGS_MODULE": "queueadmin.settings",
        "SECRET_KEY": "mirror-tests", "QA_VAR_DIR": str(tmp_path / "var"),
        **({"REDIS_URL": redis_url, "QUEUE_PREFIX": prefix} if redis_url else {}),
    }


def _migrate(database_url: str, tmp_path: Path) -> None:
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=ROOT, check=True,
                   env=_env(database_url, tmp_path))


def _rows(database_url: str) -> list[tuple[Any, ...]]:
    """(request_id, state, ...) of every Request row, straight from the database."""
    columns = ", ".join(["request_id", *COMPARED])
    sql = f"SELECT {columns} FROM core_request WHERE queue = 'q'"
    if database_url.startswith("sqlite"):
        import sqlite3

        with sqlite3.connect(database_url.removeprefix("sqlite:///")) as c:
            return c.execute(sql).fetchall()
    import psycopg

    with psycopg.connect(database_url) as c:
        return c.execute(sql).fetchall()


def test_a_mirror_killed_mid_batch_and_restarted_leaves_no_duplicate_or_missing_row(
    live_queue: Queue, redis_client: Any, redis_server: RedisServer, prefix: str,
    tmp_path: Path, database_url: str, wait_until: Any
) -> None:
    n = 12_000
    submit_many(live_queue, n)
    env = _env(database_url, tmp_path, redis_server.url, prefix)
    argv = [sys.executable, "manage.py", "runmirror", "-q", "q", "--batch", "100"]
    log = open(tmp_path / "mirror.log", "ab")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        # Killed while it works through the backlog (some rows written, not all), with a
        # batch read and not acknowledged yet.
        wait_until(lambda: len(_rows(database_url)) > 2000 and redis_client.xpending(
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

    rows = _rows(database_url)
    ids = [r[0] for r in rows]
    assert len(ids) == len(set(ids)) == n + more  # no duplicate, none missing
    expected = redis_requests(live_queue)
    got = {r[0]: dict(zip(COMPARED, r[1:], strict=True)) for r in rows}
    assert got == expected


def test_runservices_mirrors_and_fires_schedules_in_one_process_and_stops_on_sigterm(
    live_queue: Queue, redis_server: RedisServer, prefix: str, tmp_path: Path,
    database_url: str, wait_until: Any
) -> None:
    """The stack's one process for the mirror, the bulk actions and the scheduler: a schedule
    declared in Redis fires (the scheduler thread) and its request reaches the database (the
    mirror thread); SIGTERM stops all three threads and the process exits 0."""
    from core.queue.schedule.api import declare, every

    live_queue.submit([1], request_id="before", handler="h")
    declare(live_queue, every("tick", 1, handler="h", tasks=[1]))
    env = _env(database_url, tmp_path, redis_server.url, prefix)
    log = open(tmp_path / "services.log", "ab")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen([sys.executable, "manage.py", "runservices"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: {"before"} < {r[0] for r in _rows(database_url)}
                   and any(r[0].startswith("sched.tick.") for r in _rows(database_url)),
                   60, "a fired slot's request in the database")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()
    threads = (tmp_path / "services.log").read_text()
    assert "Traceback" not in threads, threads

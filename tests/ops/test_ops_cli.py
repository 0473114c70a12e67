"""The operator commands: requeue, cancel, claim, release, pause, resume. Each prints what it
did (with --dry-run the exact count, changing nothing), is audited with the OS user as the
actor, and answers bad input with a message and exit status 2."""

from __future__ import annotations

import getpass
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from core.models import AuditEntry
from core.queue import Queue, read
from core.stack.redis_server import RedisServer
from tests.ops_support import dead_letters, fingerprint_of, last_audit, still_dead
from tests.stack_support import migrated_sqlite

pytestmark = pytest.mark.django_db


@pytest.fixture
def q(django_queue: Queue) -> Queue:
    return django_queue


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_requeue_by_id_prints_what_it_did_and_audits_the_os_user(q: Queue) -> None:
    ids = dead_letters(q, 3)
    assert run("requeue", "--id", *ids[:2]) == "requeued 2 of 2; 0 skipped\n"
    entry = last_audit()
    assert (entry.actor, entry.source, entry.acted) == (f"os:{getpass.getuser()}", "cli", 2)
    assert run("requeue", "--id", *ids) == "requeued 1 of 3; 2 skipped\n"


def test_requeue_dry_run_counts_exactly_and_changes_nothing(q: Queue) -> None:
    ids = dead_letters(q, 4)
    q.requeue(ids[:1])
    out = run("requeue", "--id", *ids, "--dry-run")
    assert out == "dry run: would requeue 3 dead letters in queue default; nothing done\n"
    assert still_dead(q, ids) == 3
    assert last_audit().target.startswith("dry run: ")
    out = run("requeue", "--request", "bad", "--dry-run")
    assert "would requeue 3 dead letters of request bad" in out
    fp = fingerprint_of(q, "bad")
    out = run("requeue", "--fingerprint", fp, "--dry-run")
    assert "would requeue 4 dead letters" in out  # the history still says 4: not mirrored
    assert still_dead(q, ids) == 3


def test_requeue_a_fingerprint_group_since_a_time(q: Queue) -> None:
    ids = dead_letters(q, 5)
    fp = fingerprint_of(q, "bad")
    out = run("requeue", "--fingerprint", fp, "--since", "2000-01-01T00:00")
    assert out.endswith("requeued 5 of 5; 0 skipped\n")
    assert still_dead(q, ids) == 0
    assert last_audit().bulk is not None
    out = run("requeue", "--fingerprint", fp, "--since", "2999-01-01")
    assert "nothing to do" in out


def test_requeue_request(q: Queue) -> None:
    dead_letters(q, 2)
    assert run("requeue", "--request", "bad") == "requeued 2 of 2; 0 skipped\n"
    assert q.state("bad") == "active"


@pytest.mark.parametrize("args", [
    ("requeue",),
    ("requeue", "--id", "1-0", "--request", "r"),
    ("requeue", "--id", "junk"),
    ("requeue", "--request", "nope"),
    ("requeue", "--handler", "h", "--since", "last tuesday"),
    ("requeue", "--id", "1-0", "--since", "2026-01-01"),
    ("requeue", "--queue", "nosuchqueue", "--id", "1-0"),
    ("cancel", "bad id"),
    ("claim", "--request", "r", "--task", "1-0", "--from", "w", "--to", "ghost"),
    ("release", "--request", "r", "--task", "x", "--from", "w"),
])
def test_bad_input_is_a_message_and_exit_status_2(q: Queue, args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError) as caught:
        run(*args)
    assert caught.value.returncode == 2
    assert str(caught.value)


def test_cancel_and_its_dry_run(q: Queue) -> None:
    q.submit([1, 2], request_id="a", handler="h")
    q.submit([1], request_id="b", handler="h")
    unknown = "not in queue default (never submitted, or past its retention), skipped: zz\n"
    assert run("cancel", "a", "b", "zz", "--dry-run") == unknown + (
        "dry run: would cancel 2 requests in queue default; nothing done\n")
    assert q.state("a") == "active"
    assert run("cancel", "a", "b", "zz") == unknown + "cancelled 2 of 3; 1 skipped\n"
    assert q.state("a") == "cancelled"
    # Naming only requests the queue does not hold is bad input (exit 2), nothing done.
    with pytest.raises(CommandError, match="there is no request 'zz', 'yy' in queue") as got:
        run("cancel", "zz", "yy")
    assert got.value.returncode == 2
    with pytest.raises(CommandError, match="there is no request 'nope'") as got:
        run("release", "--request", "nope", "--task", "1-0", "--from", "w1")
    assert got.value.returncode == 2
    with pytest.raises(CommandError, match="invalid idle time") as got:
        run("release", "--request", "a", "--task", "1-0", "--from", "w1",
            "--min-idle", str(2**70))
    assert got.value.returncode == 2


def test_claim_and_release_pending_entries(q: Queue) -> None:
    q.submit([1, 2], request_id="r", handler="h", concurrency=2)
    leases = q.dequeue("w1", 2)
    q.heartbeat("w2", {"dead_after_ms": 10_000})
    tids = [e.task_id for e in read.pending(q, "r")]
    out = run("claim", "--request", "r", "--task", tids[0], "--from", "w1", "--to", "w2",
              "--dry-run")
    assert "would claim 1 pending entries" in out
    assert run("claim", "--request", "r", "--task", tids[0], "--from", "w1",
               "--to", "w2") == "claimed 1 of 1; 0 skipped\n"
    # w1 no longer holds the first: skipped; the second goes back to waiting, as the first
    # goes to w2, once w1's runs have stopped.
    assert run("release", "--request", "r", "--task", *tids, "--from", "w1") == (
        "released 1 of 2; 1 skipped\n")
    assert q.release(leases) == [-1, -1]  # w1 stopped them
    holders = {e.task_id: e.consumer for e in read.pending(q, "r")}
    assert holders == {tids[0]: "w2", tids[1]: "~waiting"}


def test_pause_and_resume(q: Queue) -> None:
    assert run("pause", "--queue", "default", "--dry-run") == (
        "dry run: would pause 1 queue in queue default; nothing done\n")
    assert not q.paused()
    assert run("pause", "--queue", "default") == "queue default paused\n"
    assert q.paused()
    assert run("pause", "--queue", "default") == "queue default was already paused\n"
    assert run("resume", "--queue", "default") == "queue default resumed\n"
    assert [e.action for e in AuditEntry.objects.order_by("id")] == [
        "pause", "pause", "pause", "resume"]


def test_a_command_run_as_a_process_exits_2_on_bad_input_without_a_traceback(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    root = Path(__file__).resolve().parents[2]
    (tmp_path / "var").mkdir()
    # Its own SQLite database, also when the suite runs on PostgreSQL.
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {
        "REDIS_URL": redis_server.url, "QUEUE_PREFIX": prefix,
        "DJANGO_SETTINGS_MODULE": "queueadmin.settings", "SECRET_KEY": "cli-tests",
        "QA_VAR_DIR": str(tmp_path / "var"),
    }
    migrated_sqlite(tmp_path / "var" / "db.sqlite3")  # as migrate makes it
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "manage.py", "requeue", "--id", "not-an-id"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "invalid task id 'not-an-id'" in proc.stderr and "Traceback" not in proc.stderr
    assert time.monotonic() - started < 30

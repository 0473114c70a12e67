"""`manage.py submit --in/--at` and `manage.py datajob submit --in`: the request (or a data
job's split request) is scheduled; a bad value is a message and exit status, never a
traceback; a time already past runs now and says so."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError

from core.cli.datajob import build_spec
from core.cli.datajob import submit as datajob_submit
from core.cli.due import due_from
from core.pipeline import jobs
from core.queue import Queue, handlers, read
from core.stack.redis_server import RedisServer
from tests.pipeline_support import flights

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def announced(django_queue: Queue) -> Queue:
    handlers.announce(django_queue, "w1", ["noop", jobs.HANDLER])
    return django_queue


def run(*args: str, **options: Any) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("submit", *args, "--handler", "noop", stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def test_submit_in_schedules_the_request(announced: Queue) -> None:
    before = announced.now_ms()
    out, err = run("1", "2", "--in", "10m", "--priority", "70", "--tenant", "acme")
    rid = out.strip()
    info = read.request(announced, rid)
    assert info is not None and info.state == "scheduled"
    assert (info.priority, info.tenant, info.total) == (70, "acme", 2)
    assert info.due_ms is not None and 0 <= info.due_ms - before - 600_000 < 5_000
    assert "scheduled: due at" in err
    assert announced.dequeue("w", 10) == []


def test_submit_at_a_time_with_an_offset(announced: Queue) -> None:
    out, err = run("1", "--at", "2099-12-01T02:00+01:00")
    info = read.request(announced, out.strip())
    assert info is not None and info.state == "scheduled"
    assert info.due_ms == 4_099_770_000_000  # 2099-12-01T01:00Z
    assert "due at 2099-12-01T01:00:00+00:00" in err


def test_a_time_already_past_runs_now_and_says_so(announced: Queue) -> None:
    out, err = run("1", "--at", "2020-01-01T00:00Z")
    assert announced.state(out.strip()) == "active"
    assert "has passed: the request runs now" in err


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--in", "soon", "cannot read 'soon' as a delay"),
    ("--in", "-5m", "cannot be negative"),
    ("--in", "11000d", "at most ten years"),
    ("--at", "tomorrow", "ISO 8601 with an offset"),
    ("--at", "2030-01-01T02:00", "has no offset"),
])
def test_bad_values_are_a_message(option: str, value: str, says: str, announced: Queue) -> None:
    with pytest.raises(CommandError, match=says):
        run("1", f"{option}={value}")
    assert read.stats(announced).requests_by_state["scheduled"] == 0


def test_in_and_at_together_are_refused() -> None:
    with pytest.raises(CommandError, match="not both"):
        due_from("5m", "2030-01-01T00:00Z")


def test_from_a_shell_a_bad_value_exits_non_zero_without_a_traceback(
    redis_server: RedisServer, prefix: str
) -> None:
    env = {"REDIS_URL": redis_server.url, "QUEUE_PREFIX": prefix}
    base = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "QUEUE_PREFIX")}
    for args, code, says in (
        (["--in", "ten minutes"], 2, "cannot read 'ten minutes' as a delay"),
        (["--at", "2030-13-01T00:00Z"], 2, "cannot read '2030-13-01T00:00Z' as a time"),
        (["--in", "5m", "--at", "2030-01-01T00:00Z"], 2, "not allowed with argument"),
    ):
        done = subprocess.run(
            [sys.executable, "manage.py", "submit", "1", "--handler", "noop", "--any-handler",
             *args], cwd=django_settings.BASE_DIR, env={**base, **env},
            capture_output=True, text=True, timeout=60)
        assert done.returncode == code, done.stderr
        assert says in done.stderr and "Traceback" not in done.stderr
        assert done.stdout == ""


def test_datajob_submit_in_schedules_its_split(tmp_path: Path, announced: Queue) -> None:
    data = tmp_path / "delayed.csv"
    flights(20).to_csv(data, index=False)
    spec = build_spec(input=str(data), format="csv", output=str(tmp_path / "out"),
                      sql="SELECT carrier, count(*) AS n FROM chunk GROUP BY carrier",
                      request_id="later1")
    out, err = io.StringIO(), io.StringIO()
    datajob_submit(spec, stdout=out, stderr=err, due=due_from("2h", None))
    assert out.getvalue() == "later1\n"
    assert "scheduled: due at" in err.getvalue()
    info = read.request(announced, "later1")
    assert info is not None and (info.state, info.total) == ("scheduled", 1)  # the split waits
    assert jobs.status(announced, "later1").state == "scheduled"
    assert announced.dequeue("w", 10) == []
    assert announced.run_now("later1") == ("open", True)  # open: the split adds the chunks
    [split] = announced.dequeue("w", 10)
    assert (split.request_id, split.payload["op"]) == ("later1", "split")

"""A submit (or datajob submit) to a paused queue is accepted and queued, and says so on
standard error: it waits until the queue is resumed, and how to resume it. To a running queue
it says nothing more than before."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command

from core.cli.datajob import build_spec
from core.cli.datajob import submit as datajob_submit
from core.pipeline import jobs
from core.queue import Queue, handlers, read
from core.stack.redis_server import RedisServer
from tests.pipeline_support import flights

pytestmark = pytest.mark.django_db

WAITS = ("is accepted, but no worker takes its tasks until the queue is resumed "
         "(`manage.py resume --queue {queue}`, or Resume on the console's overview)")


@pytest.fixture(autouse=True)
def announced(django_queue: Queue) -> Queue:
    handlers.announce(django_queue, "w1", ["noop", jobs.HANDLER])
    return django_queue


def submit(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("submit", *args, "--handler", "noop", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_a_submit_to_a_paused_queue_is_queued_and_says_it_waits(announced: Queue) -> None:
    announced.pause()

    out, err = submit("1", "2", "--request-id", "p1")

    assert out == "p1\n"
    assert err == f"warning: queue default is paused: request p1 {WAITS.format(queue='default')}\n"
    info = read.request(announced, "p1")
    assert info is not None and (info.state, info.waiting) == ("active", 2)
    assert announced.dequeue("w", 10) == []  # paused: nothing is handed out
    announced.resume()
    assert [lease.payload for lease in announced.dequeue("w", 10)] == [1, 2]


def test_a_submit_to_a_running_queue_says_nothing_more(announced: Queue) -> None:
    out, err = submit("1", "--request-id", "r1")

    assert (out, err) == ("r1\n", "")


def test_a_delayed_submit_to_a_paused_queue_says_both(announced: Queue) -> None:
    announced.pause()

    out, err = submit("1", "--in", "10m", "--request-id", "d1")

    lines = err.splitlines()
    assert out == "d1\n" and len(lines) == 2
    assert lines[0].startswith("scheduled: due at")
    assert lines[1] == (
        f"warning: queue default is paused: request d1 {WAITS.format(queue='default')}")


def test_from_a_shell_the_warning_is_on_stderr_and_the_exit_status_0(
    redis_server: RedisServer, prefix: str, announced: Queue
) -> None:
    Queue(announced.redis, "batch", prefix=prefix).pause()
    handlers.announce(Queue(announced.redis, "batch", prefix=prefix), "w1", ["noop"])
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "QUEUE_PREFIX")}

    done = subprocess.run(
        [sys.executable, "manage.py", "submit", "{}", "--handler", "noop", "--queue", "batch",
         "--request-id", "s1"], cwd=django_settings.BASE_DIR,
        env={**env, "REDIS_URL": redis_server.url, "QUEUE_PREFIX": prefix},
        capture_output=True, text=True, timeout=60)

    assert (done.returncode, done.stdout) == (0, "s1\n"), done.stderr
    assert done.stderr == (
        f"warning: queue batch is paused: request s1 {WAITS.format(queue='batch')}\n")


def test_a_data_job_submitted_to_a_paused_queue_is_queued_and_says_it_waits(
    tmp_path: Path, announced: Queue
) -> None:
    data = tmp_path / "in.csv"
    flights(20).to_csv(data, index=False)
    spec = build_spec(input=str(data), format="csv", output=str(tmp_path / "out"),
                      sql="SELECT carrier, count(*) AS n FROM chunk GROUP BY carrier",
                      request_id="job1")
    announced.pause()
    out, err = io.StringIO(), io.StringIO()

    datajob_submit(spec, stdout=out, stderr=err)

    assert out.getvalue() == "job1\n"
    assert err.getvalue() == (
        f"warning: queue default is paused: data job job1 {WAITS.format(queue='default')}\n")
    assert jobs.status(announced, "job1").state == "running"  # queued: its split waits
    announced.resume()
    [split] = announced.dequeue("w", 10)
    assert (split.request_id, split.payload["op"]) == ("job1", "split")

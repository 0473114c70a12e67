"""`manage.py submit --wait --print-results` (issue 20): the request's id, then one JSON line
per task result; through the function, call_command, and a shell with a real worker."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from django.core.management import call_command
from django.core.management.base import CommandError

from core.cli.submit import submit
from core.conf import get_queue
from core.queue import Queue, handlers, read
from core.stack.redis_server import RedisServer
from tests.conftest import keys_under


@pytest.fixture(autouse=True)
def announced(redis_client: redis.Redis, prefix: str) -> None:
    handlers.announce(Queue(redis_client, "default", prefix=prefix), "w1", ["echo"])


def finish_all(q: Queue, n: int, results: dict[Any, Any]) -> threading.Thread:
    """A stand-in worker: acks `n` tasks with results[payload] (fails those mapped to
    Exception, for good), then stops."""
    def run() -> None:
        handled, deadline = 0, time.monotonic() + 20
        while handled < n and time.monotonic() < deadline:
            for lease in q.dequeue("stand-in", 10) or []:
                value = results[lease.payload]
                if value is Exception:
                    q.fail(lease, "ValueError: no", retry=False)
                else:
                    q.ack(lease, value)
                handled += 1
            time.sleep(0.02)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("via", ["function", "command"])
def test_print_results_writes_the_id_then_one_json_line_per_task(
    django_queue: Queue, via: str
) -> None:
    worker = finish_all(django_queue, 3, {1: {"n": 1, "text": "é \"q\""}, 2: None, 3: [3, 3]})
    out, err = io.StringIO(), io.StringIO()
    if via == "function":
        submit(["1", "2", "3"], handler="echo", request_id="r", wait=True, timeout=20,
               print_results=True, stdout=out, stderr=err)
    else:
        call_command("submit", "1", "2", "3", handler="echo", request_id="r", wait=True,
                     timeout=20, print_results=True, stdout=out, stderr=err)
    worker.join(5)
    first, *lines = out.getvalue().splitlines()
    assert first == "r"
    got = [json.loads(line) for line in lines]
    tids = list(django_queue.result("r"))
    assert got == [{"task": tids[0], "result": {"n": 1, "text": "é \"q\""}},
                   {"task": tids[1], "result": [3, 3]}]  # task 2 returned None: no line


def test_a_failed_request_prints_the_results_it_has_then_fails(django_queue: Queue) -> None:
    worker = finish_all(django_queue, 2, {1: "kept", 2: Exception})
    out = io.StringIO()
    with pytest.raises(CommandError, match="request r ended failed: 1 of 2 tasks done, 1 dead"):
        submit(["1", "2"], handler="echo", request_id="r", wait=True, timeout=20,
               print_results=True, stdout=out, stderr=io.StringIO())
    worker.join(5)
    assert [json.loads(line)["result"] for line in out.getvalue().splitlines()[1:]] == ["kept"]


def test_print_results_without_wait_is_refused_before_submitting(
    django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    with pytest.raises(CommandError, match="--print-results applies only with --wait"):
        submit(["1"], handler="echo", print_results=True, stdout=io.StringIO())
    assert [k for k in keys_under(redis_client, prefix)
            if not k.endswith((":hw", ":worker:w1"))] == []  # but the announcement


def test_the_result_cap_follows_the_setting(django_queue: Queue, settings: Any) -> None:
    assert django_queue.max_result_bytes == 65_536
    settings.QUEUE_MAX_RESULT_BYTES = 10
    assert get_queue().max_result_bytes == 10


def _manage(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "QUEUE_PREFIX")}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=django_settings.BASE_DIR,
                          env={**base, **env}, capture_output=True, text=True, timeout=90)


def test_from_a_shell_with_a_real_worker(
    redis_server: RedisServer, redis_client: redis.Redis, prefix: str, spawn_worker: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """runworker keeps what `echo` returns, under the cap QA_MAX_RESULT_BYTES sets; a result
    past it dead-letters its task at once, saying its size and the cap."""
    monkeypatch.setenv("QA_MAX_RESULT_BYTES", "200")
    spawn_worker("w")
    big = json.dumps({"blob": "x" * 300})
    done = _manage(
        ["submit", '{"a": 1}', '"two words"', "--queue", "q", "--handler", "echo",
         "--any-handler", "--request-id", "ok", "--wait", "--print-results", "--timeout", "60"],
        REDIS_URL=redis_server.url, QUEUE_PREFIX=prefix,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "ok"
    assert [json.loads(x)["result"] for x in lines[1:]] == [{"a": 1}, "two words"]

    failed = _manage(
        ["submit", big, "--queue", "q", "--handler", "echo", "--request-id", "big",
         "--max-attempts", "5", "--wait", "--print-results", "--timeout", "60"],
        REDIS_URL=redis_server.url, QUEUE_PREFIX=prefix,
    )
    assert failed.returncode == 1 and "request big ended failed" in failed.stderr
    assert failed.stdout == "big\n"  # no result to print
    (letter,) = read.request_dead_letters(Queue(redis_client, "q", prefix=prefix), "big")
    assert letter.attempts == 1
    assert letter.error.startswith("ResultTooLarge: the handler's result is 311 bytes as JSON; "
                                   "the cap is 200 bytes")

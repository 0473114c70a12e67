"""The mirror under `make run` must not die: a Redis outage is one log line and a backoff, a
database error a clear log line and a retry; what was read meanwhile is applied afterwards."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from django.db import OperationalError

from core.mirror import MirrorConfig, run_mirror
from core.models import Request
from core.queue import Queue
from core.stack.redis_server import start_redis

pytestmark = [
    # Not transaction=True: its flush at the end would empty the tables that migrations fill
    # (the viewer and operator groups), which later tests need. The mirror runs in the test's
    # own thread, so its transactions nest in the test's.
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]


def caught_up(q: Queue) -> bool:
    """The mirror's group has read and acknowledged every event there is."""
    r: Any = q.redis
    try:
        groups = {g["name"]: g for g in r.xinfo_groups(q.keys.events)}
        last = r.xinfo_stream(q.keys.events)["last-generated-id"]
    except (redis.ResponseError, redis.ConnectionError):
        return False
    g = groups.get("mirror")
    return bool(g) and g["last-delivered-id"] == last and g["pending"] == 0


def run_until(q: Queue, script: Callable[[], None]) -> None:
    """Run the mirror (not in burst mode) on `q` while `script` runs in a thread, then stop it."""
    stop = threading.Event()
    failure: list[BaseException] = []

    def drive() -> None:
        try:
            script()
        except BaseException as exc:
            failure.append(exc)
        finally:
            stop.set()

    thread = threading.Thread(target=drive)
    thread.start()
    config = MirrorConfig(queues=(q.name,), idle_s=0.05)
    run_mirror(config, lambda name: Queue(q.redis, name, prefix=q.keys.prefix), stop=stop)
    thread.join(30)
    if failure:
        raise failure[0]


def wait(condition: Callable[[], Any], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_a_redis_outage_is_logged_once_and_the_mirror_carries_on(
    tmp_path: Path, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = start_redis(tmp_path / "redis", appendonly=True)
    q = Queue(redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=2),
              "q", prefix=prefix)
    q.submit([1], request_id="before", handler="h")

    def script() -> None:
        nonlocal server
        wait(lambda: caught_up(q), "the mirror to apply the first request")
        server.stop(sig=signal.SIGKILL)
        time.sleep(1.5)  # the mirror meets the outage and backs off
        server = start_redis(tmp_path / "redis", port=server.port, appendonly=True)
        q.submit([1], request_id="after", handler="h")
        wait(lambda: caught_up(q), "the mirror to apply the request after the outage")

    caplog.set_level(logging.WARNING, logger="queueadmin.mirror")
    try:
        run_until(q, script)
    finally:
        server.stop(sig=signal.SIGKILL)

    assert set(Request.objects.values_list("request_id", flat=True)) == {"before", "after"}
    messages = [r.getMessage() for r in caplog.records if r.name == "queueadmin.mirror"]
    assert len([m for m in messages if m.startswith("mirror: Redis unavailable")]) == 1, messages
    assert any(m.startswith("mirror: working again") for m in messages)


def test_a_database_error_is_a_log_line_and_the_batch_is_applied_later(
    queue: Queue, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from core.mirror import apply as mirror_apply
    from core.mirror import run as mirror_run

    real, calls = mirror_apply.commit, []

    def flaky(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) <= 3:
            raise OperationalError("database is locked")
        return real(*args, **kwargs)

    monkeypatch.setattr(mirror_apply, "commit", flaky)
    # After a database error the mirror closes its connections to reconnect; closing the
    # test's own, inside its transaction, would end the test's database.
    monkeypatch.setattr(mirror_run, "_close_db", lambda: None)
    queue.submit([1, 2], request_id="a", handler="h")
    caplog.set_level(logging.WARNING, logger="queueadmin.mirror")

    run_until(queue, lambda: wait(lambda: caught_up(queue), "the mirror to catch up"))

    assert Request.objects.get(request_id="a").total == 2
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # once, not once per retry
    assert "database error: database is locked" in errors[0].getMessage()
    assert not errors[0].exc_info  # a line, not a traceback

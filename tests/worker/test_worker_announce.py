"""Workers announce the handlers they run, per queue, before they take work (issue 6, item
9), so that `manage.py submit` can refuse a handler nobody runs; the announcement lives with
the worker's heartbeat (issue 33): withdrawn when it stops, lapsed within its --dead-after
when it dies."""

from __future__ import annotations

import signal
import time
from typing import Any

import redis
from django.core.management import call_command

from core.queue import Queue, handlers


def test_runworker_announces_its_handlers_on_each_of_its_queues_while_it_runs(
    django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    k = f"{prefix}:seen"
    django_queue.submit([{"k": k, "queues": ["default", "batch"]}], handler="announced")
    call_command("runworker", "--burst", "-q", "default", "-q", "batch", "--import",
                 "tests.handlers", "--name", "w-announce", "--heartbeat", "thread")
    seen = redis_client.hgetall(k)
    for name in ("default", "batch"):
        offered = set(seen[name].split())
        assert {"w-announce:noop", "w-announce:tracked", "w-announce:announced"} <= offered
        # It stopped: nothing it ran is offered any more.
        assert handlers.known(Queue(redis_client, name, prefix=prefix)) == {}


def test_a_killed_workers_announcement_lapses_with_its_heartbeat(
    live_queue: Queue, spawn_worker: Any, wait_until: Any
) -> None:
    proc = spawn_worker("w1")  # --dead-after 2
    wait_until(lambda: "tracked" in handlers.known(live_queue), 20, "w1 to announce")
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    killed = time.monotonic()
    wait_until(lambda: not handlers.known(live_queue), 5, "the announcement to lapse")
    assert time.monotonic() - killed <= 2.5  # within its --dead-after (2 s), and a beat

"""A queue name in the registry that is not a valid queue name (written by hand, by an old
version, by another program sharing the prefix) is skipped with one log line by everything
that lists the queues: the console's overview, /metrics, the scheduler loop and the mirror
answer and go on for the valid queues, instead of a 500 or a stopped loop (issue 33, 7)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
from django.test import Client

from core.mirror.run import MirrorConfig, run_mirror
from core.models import Request
from core.queue import Queue, read, registry
from core.queue.schedule.api import declare, every
from core.queue.schedule.scheduler import Scheduler
from tests.conftest import FakeClock

pytestmark = pytest.mark.django_db

BAD = "bad name/with {braces}"


def add_junk(q: Queue) -> None:
    """Valid queues "default" and "other", and BAD, straight into the registry zset."""
    Queue(q.redis, "other", prefix=q.keys.prefix).submit([1], handler="echo",
                                                         request_id="r-other")
    q.submit([1], handler="echo", request_id="r-default")
    q.redis.zadd(q.keys.registry, {BAD: 1, "": 2})


def skipped_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "invalid queue name" in r.getMessage()]


def test_the_registry_skips_an_invalid_name_and_logs_it_once(
        django_queue: Queue, caplog: pytest.LogCaptureFixture) -> None:
    add_junk(django_queue)
    caplog.set_level(logging.WARNING, logger="core.queue.registry")
    for _ in range(3):
        assert read.queues(django_queue.redis, prefix=django_queue.keys.prefix) == [
            "default", "other"]
    lines = skipped_lines(caplog)
    assert len(lines) == 2, lines  # BAD and "", each once however often the names are read
    assert any(repr(BAD) in line and "redis-cli ZREM" in line for line in lines)
    # The way to remove it: forget() takes an invalid name too.
    assert registry.forget(django_queue.redis, BAD, prefix=django_queue.keys.prefix)
    assert django_queue.redis.zscore(django_queue.keys.registry, BAD) is None


def test_the_overview_and_metrics_answer_with_an_invalid_name_registered(
        viewer: Client, console: Queue, settings: Any) -> None:
    add_junk(console)
    page = viewer.get("/")
    assert page.status_code == 200
    assert "other" in page.content.decode() and BAD not in page.content.decode()
    settings.METRICS_TOKEN = "t"
    metrics = Client().get("/metrics", headers={"Authorization": "Bearer t"})
    assert metrics.status_code == 200
    assert 'queue="other"' in metrics.content.decode()
    assert viewer.get("/requests/", {"queue": BAD}).status_code == 404


def test_the_scheduler_fires_into_valid_queues_with_an_invalid_name_registered(
        django_queue: Queue, clock: FakeClock) -> None:
    add_junk(django_queue)
    q = Queue(django_queue.redis, "other", prefix=django_queue.keys.prefix, clock=clock)
    declare(q, every("tick", 10, handler="echo", tasks=[{}], overlap="allow"))
    scheduler = Scheduler(q.redis, prefix=q.keys.prefix, clock=clock)  # every queue listed
    clock.advance(11_000)
    totals = scheduler.run(threading.Event(), max_ticks=1)
    assert totals.failures == 0
    assert totals.report.fired_ids == [] and totals.report.fired == 1


def test_the_mirror_follows_valid_queues_with_an_invalid_name_registered(
        django_queue: Queue) -> None:
    q = django_queue
    add_junk(q)
    config = MirrorConfig(queues=(), group="mirror", batch=1000, burst=True)
    totals = run_mirror(config, lambda name: Queue(q.redis, name, prefix=q.keys.prefix))
    assert totals.queues == {"default", "other"}
    assert set(Request.objects.values_list("request_id", flat=True)) == {"r-default",
                                                                        "r-other"}

"""Fixtures of the console tests: users by role, and a queue with something on every page.

Imported by the tests/test_console_*.py modules (`from tests.console_fixtures import ...`)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.utils import timezone

from core.models import DeadLetter, QueueSample, Request
from core.queue import Queue
from tests.ops_support import user

HOSTILE = '<script>alert(1)</script>"onmouseover=alert(2) x="'


@pytest.fixture
def console(settings: Any, django_queue: Queue) -> Queue:
    """The default queue on the suite's Redis, with the console's cache off (every request
    reads Redis, so a test sees what it just wrote)."""
    settings.CONSOLE_CACHE_S = 0
    return django_queue


def ensure_groups() -> None:
    """The viewer and operator groups, as migration 0002 makes them: a test that flushes the
    database (transactional_db) removes rows that migrations wrote, and random order may run
    one before ours."""
    from django.contrib.auth.models import Permission

    perm = Permission.objects.get(content_type__app_label="core", codename="view_console")
    for name in ("viewer", "operator"):
        Group.objects.get_or_create(name=name)[0].permissions.add(perm)


@pytest.fixture
def groups(db: Any) -> None:
    ensure_groups()


def login(name: str, role: str | None) -> Client:
    """A Client logged in as a new user `name` in the group of `role` (None: in no group),
    the group holding exactly what core.ops.perms.GROUPS grants."""
    c = Client()
    c.force_login(user(name, role))
    return c


@pytest.fixture
def viewer(db: Any) -> Client:
    return login("vera", "viewer")


@pytest.fixture
def operator(db: Any) -> Client:
    return login("otto", "operator")


@pytest.fixture
def nobody(db: Any) -> Client:
    """Logged in, in no group: may not see the console."""
    return login("nora", None)


@dataclass
class Seeded:
    running: str  # a request with a task leased to a worker
    failed: str  # a finished request with a dead letter (in Redis and in the database)
    history: str  # a finished request only the database still has
    fingerprint: str
    worker: str


@pytest.fixture
def seeded(console: Queue, db: Any) -> Seeded:
    q = console
    failed = q.submit([{"x": HOSTILE}], handler="echo", request_id="bad-1", max_attempts=1,
                      tenant="acme", priority=90).request_id
    [bad] = q.dequeue("w-2", 1)
    q.fail(bad, f"ValueError: {HOSTILE}", f"Traceback: {HOSTILE}", worker="w-2")
    running = q.submit([{"n": i, "note": HOSTILE} for i in range(5)], handler="echo",
                       request_id="run-1", tenant="acme", priority=70).request_id
    q.heartbeat("w-1", {"host": HOSTILE, "pid": 42, "slots": 2, "queues": ["default"],
                        "started": 1_700_000_000, "processed": 12, "failed": 1,
                        "dead_after_ms": 10_000, "version": "0.1.0",
                        "tasks": [{"queue": "default", "request": "run-1", "task": "1-0",
                                   "since": 1_700_000_000_000}]})
    q.dequeue("w-1", 1)
    now = timezone.now()
    for rid, state in ((running, "active"), (failed, "failed")):
        Request.objects.create(queue="default", request_id=rid, state=state, priority=70,
                               tenant="acme", handler="echo", total=5, created_at=now,
                               updated_at=now)
    Request.objects.create(
        queue="default", request_id="old-1", state="done", priority=10, tenant=HOSTILE,
        handler=HOSTILE, total=3, done=3, created_at=now - dt.timedelta(days=3),
        updated_at=now - dt.timedelta(days=3), finished_at=now - dt.timedelta(days=3),
        completions=1,
    )
    fp = "f" * 40
    for i in range(3):
        DeadLetter.objects.create(
            queue="default", entry_id=f"17000000000{i:02d}-0", request_id=failed,
            task_id=f"1-{i}", handler=HOSTILE, tenant=HOSTILE, exception="ValueError",
            error=f"ValueError: {HOSTILE} {i}", traceback=f"Traceback {HOSTILE}",
            payload='{"x": "' + HOSTILE.replace('"', '\\"') + '"}', attempts=1, worker="w-2",
            dead_at=now - dt.timedelta(minutes=i), fingerprint=fp, pattern=f"ValueError: {HOSTILE}",
        )
    QueueSample.objects.bulk_create(
        QueueSample(queue="default", at=now - dt.timedelta(seconds=10 * i),
                    submitted=1000 - 10 * i, done=900 - 9 * i, failed=50 - (i // 10),
                    retried=20, dead=3)
        for i in range(70)
    )
    return Seeded(running, failed, "old-1", fp, "w-1")

"""The console's tests (core/views, core/console, templates): pages, actions, junk input,
rendering, and real-browser tests (Playwright on Debian's chromium, marked slow) against a
stack started by tests/console/test_browser.py.

Here: the fixtures only the console's tests use (an admin's and a groupless user's Clients, the
roles' groups, a queue with something on every page). The console's queue (`console`), the
viewer's and the operator's Clients and the action tests' `world` are in tests/conftest.py, as
other folders use them too; helpers that are not fixtures are in tests/console_support.py."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from core.models import DeadLetter, QueueSample, Request
from core.queue import Queue
from tests.console_support import HOSTILE, Seeded, ensure_groups, logged_in_client


@pytest.fixture
def admin(db: Any) -> Client:
    """A Client logged in as ada, in the admin group (every action of the console)."""
    return logged_in_client("ada", "admin")


@pytest.fixture
def nobody(db: Any) -> Client:
    """Logged in, in no group: may not see the console."""
    return logged_in_client("nora", None)


@pytest.fixture
def groups(db: Any) -> None:
    ensure_groups()


@pytest.fixture
def seeded(console: Queue, db: Any) -> Seeded:
    """Something on every page, with HOSTILE text wherever a page shows what a user wrote."""
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

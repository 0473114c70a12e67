"""Fixtures of the console's action tests: clients by role (viewer, operator, admin), and a
queue with real dead letters (in Redis, and mirrored into the database), a leased task of a
live worker and one of a stale worker.

Imported by tests/test_console_actions*.py (`from tests.action_fixtures import ...`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.test import Client

from core.models import DeadLetter
from core.queue import Queue
from tests.console_fixtures import HOSTILE, console, login  # noqa: F401
from tests.mirror_support import mirror


@pytest.fixture
def viewer(db: Any) -> Client:
    return login("vera", "viewer")


@pytest.fixture
def operator(db: Any) -> Client:
    return login("otto", "operator")


@pytest.fixture
def admin(db: Any) -> Client:
    return login("ada", "admin")


@dataclass
class World:
    q: Queue
    failed: str  # a failed request with three dead letters
    dead_ids: list[str]  # their dead-stream ids, oldest first
    fingerprint: str
    running: str  # an active request: task 0 leased to the live worker w-live, 1 to w-stale
    live_task: str
    stale_task: str


def fail_tasks(q: Queue, rid: str, n: int, worker: str = "w-fail") -> None:
    """Lease and fail the request's next n tasks (max_attempts 1: each goes dead)."""
    done = 0
    while done < n:
        leases = q.dequeue(worker, min(100, n - done))
        assert leases, f"only {done} of {n} tasks could be leased"
        for lease in leases:
            q.fail(lease, f"ValueError: bad row {done}", "Traceback ...", worker=worker)
            done += 1


@pytest.fixture
def world(console: Queue, db: Any) -> World:  # noqa: F811
    q = console
    failed = q.submit([{"row": i} for i in range(3)], handler="echo", request_id="bad-1",
                      max_attempts=1, tenant="acme").request_id
    fail_tasks(q, failed, 3)
    now = q.now_ms()
    q.heartbeat("w-live", {"host": "h", "pid": 1, "dead_after_ms": 60_000, "queues": ["default"]})
    running = q.submit([{"n": i} for i in range(4)], handler="echo", request_id="run-1",
                       concurrency=4).request_id
    [live] = q.dequeue("w-live", 1)
    [stale] = q.dequeue("w-stale", 1)
    # w-stale last beat 8 s ago with a dead-after of 10 s: stale, not gone.
    q.heartbeat("w-stale", {"host": "h", "pid": 2, "dead_after_ms": 10_000,
                            "queues": ["default"],
                            "tasks": [{"queue": "default", "request": running,
                                       "task": stale.task_id, "since": now}]})
    q.redis.zadd(q.keys.workers, {"w-stale": now - 8_000})
    mirror(q)
    letters = list(DeadLetter.objects.filter(queue="default", request_id=failed)
                   .order_by("entry_id"))
    assert len(letters) == 3
    return World(q, failed, [d.entry_id for d in letters], letters[0].fingerprint, running,
                 live.task_id, stale.task_id)


def field(html: str, name: str) -> str:
    """The value of the first hidden input `name` of a page (the form's nonce, next...)."""
    m = re.search(rf'name="{re.escape(name)}" value="([^"]*)"', html)
    assert m, f"no input {name!r} on the page"
    return m.group(1)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def has_action_buttons(html: str) -> bool:
    return bool(re.search(r'(formaction|action)="/actions/', html))


def stats(q: Queue) -> Any:
    from core.queue import introspect

    return introspect.stats(q)

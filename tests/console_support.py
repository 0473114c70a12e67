"""What the console's tests share besides their fixtures (tests/conftest.py,
tests/console/conftest.py): hostile text, the roles' groups, a logged-in Client by role, what
the `seeded` and `world` fixtures made, dead letters made by failing tasks, and reading a
page's form and the queue's counts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Group
from django.test import Client

from core.queue import Queue
from tests.ops_support import user

HOSTILE = '<script>alert(1)</script>"onmouseover=alert(2) x="'


def ensure_groups() -> None:
    """The viewer and operator groups, as migration 0002 makes them: a test that flushes the
    database (transactional_db) removes rows that migrations wrote, and random order may run
    one before ours."""
    from django.contrib.auth.models import Permission

    perm = Permission.objects.get(content_type__app_label="core", codename="view_console")
    for name in ("viewer", "operator"):
        Group.objects.get_or_create(name=name)[0].permissions.add(perm)


def logged_in_client(name: str, role: str | None) -> Client:
    """A Client logged in as a new user `name` in the group of `role` (None: in no group),
    the group holding exactly what core.ops.perms.GROUPS grants."""
    c = Client()
    c.force_login(user(name, role))
    return c


@dataclass
class Seeded:
    running: str  # a request with a task leased to a worker
    failed: str  # a finished request with a dead letter (in Redis and in the database)
    history: str  # a finished request only the database still has
    fingerprint: str
    worker: str


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


def field(html: str, name: str) -> str:
    """The value of the first hidden input `name` of a page (the form's nonce, next...)."""
    m = re.search(rf'name="{re.escape(name)}" value="([^"]*)"', html)
    assert m, f"no input {name!r} on the page"
    return m.group(1)


def has_action_buttons(html: str) -> bool:
    return bool(re.search(r'(formaction|action)="/actions/', html))


def stats(q: Queue) -> Any:
    from core.queue import read

    return read.stats(q)

"""What the console's tests share besides their fixtures (tests/conftest.py,
tests/console/conftest.py): hostile text, the roles' groups, a logged-in Client by role, and
what the `seeded` fixture made."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import Group
from django.test import Client

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


def login(name: str, role: str | None) -> Client:
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

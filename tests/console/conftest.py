"""The console's tests (core/views, core/console, templates): pages, actions, junk input,
rendering, and real-browser tests (test_browser*.py: Playwright on Debian's chromium, marked
slow), each module against a `manage.py runstack` of its own (its module-scoped `stack`).

Here: the fixtures only the console's tests use: an admin's and a groupless user's Clients, the
roles' groups, a queue with something on every page; and the browser tests' browser, pages and
accounts. The console's queue (`console`), the viewer's and the operator's Clients and the
action tests' `world` are in tests/conftest.py, as other folders use them too. Helpers that are
not fixtures: tests/console_support.py, tests/browser_support.py."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from core.models import DeadLetter, QueueSample, Request
from core.queue import Queue
from tests.browser_support import (
    CHROMIUM,
    PASSWORD,
    SCREENSHOTS,
    Stack,
    log_in,
    logged_in_pages,
    manage,
)
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


# -- browser tests: each module defines the `stack` these run against ----------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, stack: Stack) -> Iterator[Any]:
    """A page logged in as the stack's admin, through the login form as a user would."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.goto(stack.url("/"))
    assert "/login/" in pg.url
    log_in(pg, "admin", PASSWORD)
    yield pg
    context.close()
    # No script error and no CSP refusal on any page the test opened.
    assert errors == []


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Any:
    """shots(page, name): with --screenshots, the whole page saved as var/screenshots/<name>.png."""
    wanted = request.config.getoption("--screenshots")

    def shot(pg: Any, name: str) -> None:
        if wanted:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)

    return shot


@pytest.fixture(scope="module")
def accounts(stack: Stack) -> dict[str, str]:
    """An operator and a viewer, made as an administrator would (createuser)."""
    out = {}
    for name, role in (("otto", "operator"), ("vera", "viewer")):
        said = manage(stack, "createuser", name, "--role", role)
        out[name] = said.rsplit(": ", 1)[1].strip()
    return out


@pytest.fixture
def login(browser: Any, stack: Stack, accounts: dict[str, str]) -> Iterator[Callable[[str], Any]]:
    """login(name) -> a page logged in through the login form as one of `accounts`; no script
    error or CSP refusal allowed on any page it opens."""
    yield from logged_in_pages(browser, stack, accounts)

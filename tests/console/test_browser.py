"""The console in a real browser (Playwright driving Debian's Chromium) against the stack
`make run` serves (`manage.py runstack`: gunicorn, the mirror, a worker): log in, watch a
request's progress bar reach done without reloading, open a dead-letter group, see a worker
go stale after a SIGKILL.

`pytest tests/console/test_browser.py --screenshots` also saves each page under var/screenshots/.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser_support import ROOT, Stack, queue, require_browser, running_stack

require_browser()
pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One `runstack --workers 1` for the module, in a directory of its own, on free ports,
    its worker running the browser tests' handlers too (tests.browser_handlers)."""
    with running_stack(tmp_path_factory.mktemp("browser-var"),
                       {"QA_HANDLER_MODULES": "tests.browser_handlers"}) as running:
        yield running


def test_a_running_requests_progress_bar_reaches_done_without_a_reload(
    stack: Stack, page: Any, shots: Any
) -> None:
    q = queue(stack)
    rid = q.submit([{"seconds": 0.6}] * 6, handler="sleep", concurrency=1).request_id
    page.goto(stack.url(f"/requests/default/{rid}/"))
    page.evaluate("window.__notReloaded = true")
    state = page.locator("h1 .state")
    assert state.inner_text() in ("active", "open")
    done_cell = page.locator("table.kv tr", has_text="Done").locator("td")
    first_done = int(done_cell.inner_text())
    assert first_done < 6
    shots(page, "request-running")
    page.wait_for_selector("h1 .state.s-done", timeout=30_000)
    assert int(page.locator("table.kv tr", has_text="Done").locator("td").inner_text()) == 6
    assert page.evaluate("window.__notReloaded") is True  # htmx swapped, nothing reloaded
    shots(page, "request-done")
    # The requests list shows it done too, with a full progress bar.
    page.goto(stack.url(f"/requests/?queue=default&id={rid}"))
    assert rid in page.content()
    shots(page, "requests")
    page.goto(stack.url("/?queue=default"))
    page.wait_for_selector("svg", timeout=10_000)  # the charts
    shots(page, "overview")


def test_a_dead_letter_group_opens_to_its_letters(stack: Stack, page: Any, shots: Any) -> None:
    q = queue(stack)
    rid = q.submit(
        [{"message": f"bad row {i}"} for i in range(5)], handler="fail", max_attempts=1
    ).request_id
    assert q.wait(rid, timeout=30) == "failed"
    page.goto(stack.url("/dead/?queue=default"))
    # The mirror copies dead letters into the database; the page is live.
    group = page.locator("a[href*='/dead/default/']").first
    group.wait_for(timeout=30_000)
    shots(page, "dead-letter-groups")
    group.click()
    page.wait_for_url(re.compile(r".*/dead/default/[0-9a-f]+/.*"))
    page.wait_for_selector(f"text={rid}", timeout=10_000)
    assert page.locator("text=bad row").count() >= 1
    shots(page, "dead-letter-group")


def test_a_worker_killed_with_sigkill_turns_stale_on_the_workers_page(
    stack: Stack, page: Any, shots: Any
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_PREFIX"}
    env |= {"REDIS_URL": stack.redis_url, "DJANGO_SETTINGS_MODULE": "queueadmin.settings"}
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "--queue", "default", "--dead-after", "4"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        page.goto(stack.url("/workers/?queue=default"))
        pid = page.locator(f"td span:text-is('pid {worker.pid}')")  # under its host
        row = page.locator("tr[data-worker]", has=pid)
        deadline = time.monotonic() + 30
        while row.count() == 0:  # the page polls; the worker registers at its first beat
            assert time.monotonic() < deadline, page.content()
            page.wait_for_timeout(500)
        assert row.locator(".wstate").inner_text() == "alive"
        page.evaluate("window.__notReloaded = true")
        shots(page, "workers")
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its heartbeat process
        row.locator(".wstate.w-stale, .wstate.w-gone").wait_for(timeout=30_000)
        assert page.evaluate("window.__notReloaded") is True
        shots(page, "workers-stale")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


def test_the_pending_entries_page_shows_a_leased_task(
    stack: Stack, page: Any, shots: Any
) -> None:
    q = queue(stack)
    rid = q.submit([{"steps": 1}], handler="steps").request_id  # leased until told to end
    page.goto(stack.url("/pending/?queue=default"))
    page.wait_for_selector(f"text={rid}", timeout=20_000)
    shots(page, "pending")
    q.redis.set(f"browser:steps:{rid}:0", "1")
    assert q.wait(rid, timeout=30) == "done"

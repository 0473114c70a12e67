"""Worker control in a real browser (Playwright driving Debian's Chromium) against `manage.py
runstack` (one worker of two slots, importing tests.browser_handlers): the admin presses
Quiet on the workers page; the running task finishes while a task submitted after waits,
though a slot is free; Resume, and it runs.

`pytest tests/console/test_browser_worker_control.py --screenshots` saves the quiet worker's
row under var/screenshots/.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from core.queue import read
from tests.browser_support import Stack, queue, require_browser, running_stack, until

require_browser()
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    var = tmp_path_factory.mktemp("browser-workerctl-var")
    with running_stack(var, {"QA_HANDLER_MODULES": "tests.browser_handlers"}) as running:
        yield running


def test_quiet_stops_new_leases_while_the_running_task_finishes(
    stack: Stack, page: Any, shots: Any
) -> None:
    q = queue(stack)
    until(lambda: read.workers(q).items, 60, "the stack's worker to register")
    first = q.submit([{"steps": 1}], handler="steps").request_id  # runs until told to end
    until(lambda: int(q.redis.hget(q.keys.request(first), "leased") or 0) == 1, 30,
          "the worker to take the first task")
    page.goto(stack.url("/workers/?queue=default"))
    row = page.locator("tr[data-worker]").first
    row.locator("button", has_text="Quiet").click()
    page.wait_for_selector(".msg", timeout=10_000)
    assert "quiet asked" in page.locator(".msg").inner_text()
    # The worker goes quiet at its next heartbeat (2 s: --dead-after 10): the page's live
    # update shows it.
    page.locator("tr[data-worker] .w-control", has_text=re.compile(r"^quiet$")).wait_for(
        timeout=15_000)
    shots(page, "workers-quiet")
    assert page.locator("tr[data-worker] button", has_text="Resume").count() == 1

    second = q.submit([{"seconds": 0.2}], handler="slow").request_id
    q.redis.set(f"browser:steps:{first}:0", "1")
    assert q.wait(first, timeout=30) == "done"  # the running task finished
    time.sleep(3)  # over a heartbeat more: a worker taking work would have taken it
    info = read.request(q, second)
    assert info is not None and (info.waiting, info.leased, info.done) == (1, 0, 0)

    page.reload()
    page.locator("tr[data-worker] button", has_text="Resume").click()
    page.wait_for_selector(".msg", timeout=10_000)
    assert "resumed" in page.locator(".msg").inner_text()
    assert q.wait(second, timeout=30) == "done"
    page.goto(stack.url("/audit/?queue=default"))
    rows = page.locator("tr[id^=audit-]")
    assert rows.filter(has_text="worker-quiet").count() == 1
    assert rows.filter(has_text="worker-resume").count() == 1

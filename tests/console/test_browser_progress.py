"""A running task's progress on the console, in a real browser against `manage.py runstack`
whose worker imports tests.browser_handlers: the request page follows the task's reports live
(bar, message, log lines) without a reload, and the workers page shows the task's progress.

`pytest tests/console/test_browser_progress.py --screenshots` saves both pages under
var/screenshots/.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser_support import Stack, queue, require_browser, running_stack

require_browser()
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    var = tmp_path_factory.mktemp("browser-progress-var")
    with running_stack(var, {"QA_HANDLER_MODULES": "tests.browser_handlers"}) as running:
        yield running


def test_the_request_page_follows_a_tasks_progress_and_log_live(
    stack: Stack, page: Any, shots: Any
) -> None:
    q = queue(stack)
    rid = q.submit([{"steps": 3}], handler="steps").request_id
    page.goto(stack.url(f"/requests/default/{rid}/"))
    page.evaluate("window.__notReloaded = true")
    bar = page.locator("#task-progress tr[data-running] .task-progress")
    # The first report arrives while the page polls (every second here): no reload.
    page.locator('#task-progress tr[data-running] .task-progress[data-done="0"]').wait_for(
        timeout=30_000)
    row = page.locator("#task-progress tr[data-running]")
    assert "step 1 of 3" in row.locator(".task-message").inner_text()
    assert "0 / 3 (0%)" in bar.inner_text()
    row.locator(".tasklog", has_text="started step 1").wait_for(timeout=15_000)
    for step in (1, 2):
        q.redis.set(f"browser:steps:{rid}:{step - 1}", 1)
        page.locator(f'#task-progress .task-progress[data-done="{step}"]').wait_for(
            timeout=15_000)
        assert f"step {step + 1} of 3" in row.locator(".task-message").inner_text()
        row.locator(".tasklog", has_text=f"started step {step + 1}").wait_for(timeout=15_000)
    assert f"{2} / 3 (66%)" in bar.inner_text()
    shots(page, "request-task-progress")
    # The workers page shows the task beside its worker, with its progress.
    workers = page.context.new_page()
    workers.goto(stack.url("/workers/?queue=default"))
    slot = workers.locator(".slot-progress")
    slot.wait_for(timeout=15_000)
    assert "2 / 3 (66%)" in slot.inner_text() and "step 3 of 3" in slot.inner_text()
    shots(workers, "workers-task-progress")
    workers.close()
    q.redis.set(f"browser:steps:{rid}:2", 1)
    page.wait_for_selector("h1 .state.s-done", timeout=30_000)
    done = page.locator("#task-progress tr").filter(has_text="all steps done")
    assert "3 / 3 (100%)" in done.inner_text()
    assert page.locator("#task-progress tr[data-running]").count() == 0
    assert page.evaluate("window.__notReloaded") is True  # htmx swapped, nothing reloaded

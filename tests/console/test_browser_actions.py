"""The console's operator actions in a real browser (Playwright driving Debian's Chromium)
against `manage.py runstack` whose workers import tests.browser_handlers: requeue a
fingerprint group from its preview and watch the failed request reopen and finish; release
everything a stale worker holds in one click; cancel a running request and see its task
stop; a viewer finds no action button.

`pytest tests/console/test_browser_actions.py --screenshots` saves the preview, the progress and the
audit log under var/screenshots/.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser_support import ROOT, Stack, manage, queue, require_browser, running_stack, until

require_browser()
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    var = tmp_path_factory.mktemp("browser-actions-var")
    with running_stack(var, {"QA_HANDLER_MODULES": "tests.browser_handlers"}) as running:
        yield running


def test_requeue_a_fingerprint_group_from_its_preview_and_the_request_finishes(
    stack: Stack, login: Any, shots: Any
) -> None:
    q = queue(stack)
    rid = q.submit([{"row": i} for i in range(6)], handler="flaky", max_attempts=1,
                   tenant="acme").request_id
    assert q.wait(rid, timeout=30) == "failed"
    page = login("otto")
    page.goto(stack.url("/dead/?queue=default"))
    row = page.locator("tr[data-fingerprint]", has_text="upstream refused row")
    row.wait_for(timeout=30_000)  # the mirror records the letters; the page polls
    # all six recorded (no wait_for_function: its string is an eval, which the CSP refuses)
    row.locator("td.n b", has_text=re.compile(r"^6$")).wait_for(timeout=30_000)
    shots(page, "dead-letter-groups-actions")
    row.locator("button", has_text="Requeue group").click()
    page.wait_for_url(re.compile(r".*/actions/bulk/\d+/$"))
    assert page.locator("[data-count]").inner_text() == "6"
    assert "fingerprint=" in page.locator("h1").inner_text()
    assert page.locator("table.sample tbody tr").count() == 6
    assert "nothing has been done yet" in page.content()
    shots(page, "action-preview")
    page.fill("input[name=rate]", "50")
    page.click("button[data-confirm-button]")
    page.wait_for_selector(".result", timeout=30_000)  # the progress page, polled
    assert "Finished: 6 of 6 requeued; 0 skipped." in page.locator(".result").inner_text()
    shots(page, "action-progress")
    page.goto(stack.url(f"/requests/default/{rid}/"))
    page.wait_for_selector("h1 .state.s-done", timeout=30_000)
    assert q.state(rid) == "done"
    page.goto(stack.url("/audit/?queue=default"))
    assert page.locator("tr[id^=audit-]", has_text="otto").count() >= 1


def test_release_everything_a_stale_worker_holds_in_one_click(
    stack: Stack, login: Any, shots: Any
) -> None:
    env = {**stack.env, "REDIS_URL": stack.redis_url,
           "QA_HANDLER_MODULES": "tests.browser_handlers"}
    side = queue(stack, "side")
    rid = side.submit([{"seconds": 60, "again": 0.2}] * 2, handler="slow").request_id

    # Stale after half its --dead-after without a beat, its leases expired (and reaped by the
    # services process, whatever worker is alive) after all of it: 12 s leaves a stale
    # window of 6 s for the click, also on a loaded machine.
    def worker(name: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "manage.py", "runworker", "--queue", "side", "--slots", "2",
             "--dead-after", "12", "--name", name], cwd=ROOT, env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    stuck = worker("stuck-1")
    helper = None
    try:
        until(lambda: int(side.redis.hget(side.keys.request(rid), "leased") or 0) == 2, 30,
              "the worker to hold both tasks")

        def beat_lists_both() -> bool:  # the heartbeat reports what it holds a beat later
            info = side.redis.hget(side.keys.worker("stuck-1"), "info")
            return bool(info) and len(json.loads(info).get("tasks") or []) == 2

        until(beat_lists_both, 30, "a beat that lists both tasks")
        os.killpg(stuck.pid, signal.SIGSTOP)  # alive but silent: it goes stale
        page = login("otto")
        page.goto(stack.url("/workers/?queue=side"))
        row = page.locator("tr[data-worker='stuck-1']")
        row.locator(".wstate.w-stale").wait_for(timeout=30_000)
        button = row.locator("button", has_text="Release its 2 tasks")
        button.wait_for(timeout=10_000)
        shots(page, "workers-stale-release")
        button.click()
        page.wait_for_selector(".msg", timeout=10_000)
        assert "released 2 of 2; 0 skipped" in page.locator(".msg").inner_text()
        # The old runs may go on until their leases run out (at most --dead-after, 12 s): the
        # tasks move on then, not before, and a live worker takes them and finishes.
        helper = worker("helper-1")
        assert side.wait(rid, timeout=60) == "done"
    finally:
        for proc in (stuck, helper):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def test_cancel_a_running_request_and_its_task_stops(
    stack: Stack, login: Any, shots: Any
) -> None:
    q = queue(stack)
    rid = q.submit([{"seconds": 60}] * 3, handler="slow", concurrency=1).request_id
    page = login("otto")
    page.goto(stack.url(f"/requests/default/{rid}/"))
    page.locator("table.kv tr", has_text="Leased").locator("td:text-is('1')").wait_for(
        timeout=30_000)
    page.click("button:has-text('Cancel this request')")
    page.wait_for_url(re.compile(r".*/actions/cancel/$"))
    assert "Cancel 1 request?" in page.locator("h1").inner_text()
    shots(page, "action-confirm-cancel")
    page.click("button:has-text('Cancel 1 request')")
    page.wait_for_url(re.compile(rf".*/requests/default/{rid}/$"))
    assert "cancelled" in page.locator(".msg").inner_text()
    page.wait_for_selector("h1 .state.s-cancelled", timeout=30_000)
    until(lambda: q.redis.get(f"browser:stopped:{rid}") == "1", 30,
          "the running task to be told to stop")
    assert int(q.redis.hget(q.keys.request(rid), "leased") or 0) == 0


def test_a_viewer_finds_no_action_button(stack: Stack, login: Any) -> None:
    q = queue(stack)
    # "fail", not "flaky": the requeue test counts the flaky group's letters
    rid = q.submit([{"row": 1}], handler="fail", max_attempts=1).request_id
    assert q.wait(rid, timeout=30) == "failed"
    page = login("vera")
    for path in ("/", "/requests/", f"/requests/default/{rid}/", "/pending/", "/dead/",
                 "/workers/", "/audit/"):
        page.goto(stack.url(path))
        assert page.locator("button[formaction*='/actions/'], form[action*='/actions/'], "
                            "input[data-select]").count() == 0, path
        assert page.locator("nav a", has_text="Audit log").count() == 1


def test_a_pause_shows_on_every_page_and_the_audit_log_has_every_source(
    stack: Stack, login: Any, shots: Any
) -> None:
    manage(stack, "pause", "--queue", "default")  # from the command line: actor os:<login>
    try:
        page = login("otto")
        for path in ("/", "/requests/", "/dead/", "/workers/", "/audit/"):
            page.goto(stack.url(path))
            assert "Queue default is paused" in page.locator("#paused-banner").inner_text()
            # an operator may not resume (that needs pause_queue): no button in the banner
            assert page.locator("#paused-banner button").count() == 0
        page.goto(stack.url("/"))
        shots(page, "paused-banner")
    finally:
        manage(stack, "resume", "--queue", "default")
    page.goto(stack.url("/audit/?queue=default"))
    rows = page.locator("tr[id^=audit-]")
    assert rows.filter(has_text="pause").filter(has_text="cli").count() >= 1
    assert rows.filter(has_text="resume").count() >= 1
    shots(page, "audit-log")
    page.select_option("select[name=action]", "pause")
    page.click("form.filters button[type=submit]")
    page.wait_for_url(re.compile(r".*action=pause.*"))
    assert page.locator("tr[id^=audit-]").count() == page.locator(
        "tr[id^=audit-]", has_text="pause").count() >= 1


def test_pause_asks_first_then_pauses_and_the_banner_resumes(
    stack: Stack, page: Any, shots: Any
) -> None:
    """Issue 33 (12): the overview's Pause shows what it stops; only its button pauses."""
    page.goto(stack.url("/"))
    page.locator("a[data-pause]").first.click()
    page.wait_for_url(re.compile(r".*/actions/pause/\?queue=default.*"))
    assert page.locator("h1").inner_text() == "Pause queue default?"
    items = page.locator("#confirm-items").inner_text()
    assert "waiting task" in items and "stay waiting" in items and "finish" in items
    shots(page, "pause-question")
    assert "is paused" not in page.content()  # asking changed nothing
    try:
        page.click("button:has-text('Pause default')")
        page.wait_for_selector(".msg-success", timeout=10_000)
        assert "queue default paused" in page.locator(".msg-success").inner_text()
        # The page after the redirect may show the queue's figures of up to QA_CONSOLE_CACHE_S
        # ago; the next one shows the banner.
        until(lambda: page.reload() and page.locator("#paused-banner").count(), 10,
              "the paused banner")
        with page.expect_navigation():  # its form's answer, before the reloads below
            page.locator("#paused-banner button", has_text="Resume").click()
        until(lambda: page.reload() and not page.locator("#paused-banner").count(), 10,
              "the banner gone")
    finally:
        manage(stack, "resume", "--queue", "default")  # whatever happened above


def test_a_selection_survives_the_polling_and_polling_resumes_after(
    stack: Stack, login: Any
) -> None:
    q = queue(stack)
    first = q.submit([{"seconds": 30}], handler="slow").request_id
    page = login("otto")
    page.goto(stack.url("/requests/?queue=default"))
    box = page.locator(f"tr[data-request='{first}'] input[data-select]")
    box.wait_for(timeout=30_000)  # the mirror has recorded it; the list polls
    cancel = page.locator("button", has_text="Cancel selected")
    assert cancel.is_disabled()
    box.check()
    assert cancel.is_enabled()
    assert page.locator("[data-selected-count]").inner_text() == "1 selected"
    second = q.submit([{"seconds": 30}], handler="slow").request_id
    page.wait_for_timeout(7_000)  # two polls' worth, skipped: the selection is still there
    assert box.is_checked()
    assert page.locator(f"tr[data-request='{second}']").count() == 0
    box.uncheck()
    assert cancel.is_disabled()
    page.locator(f"tr[data-request='{second}']").wait_for(timeout=15_000)  # polling is back
    q.cancel(first)
    q.cancel(second)

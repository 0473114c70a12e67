"""The Schedules page in a real browser (Playwright driving Debian's Chromium) against
`manage.py runstack` (its scheduler and a worker running tests.browser_handlers): an admin
creates a schedule after previewing its next runs, an operator runs it now and sees the run's
outcome follow in the last runs, pauses and resumes it; the admin edits it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from core.queue.schedule.store import Schedules
from tests.browser_support import (
    PASSWORD,
    Stack,
    manage,
    queue,
    require_browser,
    running_stack,
    until,
)

require_browser()
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    var = tmp_path_factory.mktemp("browser-schedules-var")
    with running_stack(var, {"QA_HANDLER_MODULES": "tests.browser_handlers"}) as running:
        yield running


@pytest.fixture(scope="module")
def accounts(stack: Stack) -> dict[str, str]:
    said = manage(stack, "createuser", "otto", "--role", "operator")
    return {"otto": said.rsplit(": ", 1)[1].strip(), "admin": PASSWORD}


def test_create_with_preview_run_now_pause_and_edit(stack: Stack, login: Any,
                                                    shots: Any) -> None:
    admin = login("admin")
    admin.goto(stack.url("/schedules/?queue=default"))
    admin.fill("input[name=name]", "nightly")
    admin.fill("input[name=handler]", "slow")
    admin.fill("textarea[name=tasks]", '{"seconds": 0.5}')
    admin.fill("input[name=cron]", "30 2 * * *")
    admin.fill("input[name=tz]", "Europe/Berlin")
    admin.click("text=Preview next runs")
    # The preview also follows the typing (debounced): wait for the one of the last field.
    until(lambda: "At 02:30 (Europe/Berlin)" in admin.inner_text("#preview"), 10,
          "the preview of the form as typed")
    assert admin.locator("[data-preview] li").count() == 5
    shots(admin, "schedule-preview")
    admin.fill("input[name=tz]", "Europe/Nowhere")
    until(lambda: "unknown time zone 'Europe/Nowhere'" in admin.inner_text("#preview"), 10,
          "the preview to say what is wrong")
    admin.fill("input[name=tz]", "Europe/Berlin")
    until(lambda: admin.locator("[data-preview] li").count() == 5, 10, "the preview again")
    admin.click("#schedule-form button[type=submit]")
    admin.wait_for_selector('tr[data-schedule="nightly"]')
    assert "At 02:30 (Europe/Berlin)" in admin.inner_text('tr[data-schedule="nightly"]')

    otto = login("otto")
    otto.goto(stack.url("/schedules/?queue=default"))
    row = 'tr[data-schedule="nightly"]'
    assert otto.locator(f"{row} >> text=Edit").count() == 0  # operators run, admins edit
    otto.click(f"{row} >> text=Run now")
    otto.wait_for_selector(f"{row} .last-runs a")
    rid = otto.inner_text(f"{row} .last-runs a").strip()
    assert rid.startswith("sched.nightly.now")
    # The last runs follow the real run to its end (the page polls).
    until(lambda: otto.inner_text(f"{row} [data-outcome]").strip() == "done", 30,
          "the run's outcome to show done")
    shots(otto, "schedules-after-run")
    otto.click(f"{row} >> text=Pause")
    otto.wait_for_selector(f"{row} [data-paused]")
    s = Schedules(queue(stack)).require("nightly")
    assert s.paused and s.paused_by == "otto"
    otto.click(f"{row} >> text=Resume")
    until(lambda: otto.locator(f"{row} [data-paused]").count() == 0, 10, "resumed")

    admin.goto(stack.url("/schedules/?queue=default"))
    admin.click(f"{row} >> text=Edit")
    admin.wait_for_url(re.compile(r".*/schedules/default/nightly/edit/"))
    admin.fill("input[name=cron]", "45 3 * * 1-5")
    admin.click("#schedule-form button[type=submit]")
    admin.wait_for_selector(f"{row} >> text=Monday through Friday")
    assert Schedules(queue(stack)).require("nightly").schedule.cron == "45 3 * * 1-5"


def test_a_late_preview_never_overwrites_the_newer_one(stack: Stack, login: Any) -> None:
    """The button's preview and the typing's preview target one box: when the older answer
    comes last (a slow server), it must not put back runs the form no longer asks for."""
    admin = login("admin")
    admin.goto(stack.url("/schedules/?queue=default"))
    admin.fill("input[name=name]", "late")
    admin.fill("input[name=handler]", "slow")
    admin.fill("textarea[name=tasks]", "{}")
    admin.fill("input[name=cron]", "30 2 * * *")
    admin.fill("input[name=tz]", "Europe/Berlin")
    admin.press("input[name=tz]", "Tab")  # its change event: the typing's own preview
    until(lambda: "At 02:30 (Europe/Berlin)" in admin.inner_text("#preview"), 10,
          "the preview of the form as typed")
    held: list[Any] = []
    admin.route("**/schedules/preview/**", lambda route: held.append(route) if not held
                else route.continue_())
    admin.click("text=Preview next runs")  # held: the server is slow with this one
    # Playwright calls the route's handler only inside one of its own calls: a plain sleep
    # never sees it when the request leaves after click() returned (a loaded machine).
    until(lambda: held or admin.wait_for_timeout(100), 10, "the button's preview to be sent")
    admin.fill("input[name=tz]", "Europe/Nowhere")
    admin.wait_for_timeout(1000)  # the typing's preview is due (400 ms), answered or waiting
    held[0].continue_()  # the older answer arrives now, after the newer one was asked for
    until(lambda: "unknown time zone 'Europe/Nowhere'" in admin.inner_text("#preview"), 10,
          "the newer preview")
    admin.wait_for_timeout(1500)
    assert "unknown time zone 'Europe/Nowhere'" in admin.inner_text("#preview")
    assert admin.locator("[data-preview] li").count() == 0

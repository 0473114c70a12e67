"""The Limits page in a real browser (Playwright driving Debian's Chromium) against `manage.py
runstack` (a worker of two slots running tests.browser_handlers): an admin adds a concurrency
cap on a resource, and the page follows, live, the worker holding to it; the admin raises the
cap and the page shows the second slot taken; a viewer reads it without forms; the admin
removes it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from core.queue import read
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
ROW = 'tr[data-limit="warehouse"]'


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    var = tmp_path_factory.mktemp("browser-limits-var")
    with running_stack(var, {"QA_HANDLER_MODULES": "tests.browser_handlers"}) as running:
        yield running


@pytest.fixture(scope="module")
def accounts(stack: Stack) -> dict[str, str]:
    said = manage(stack, "createuser", "vera", "--role", "viewer")
    return {"vera": said.rsplit(": ", 1)[1].strip(), "admin": PASSWORD}


def test_add_follow_live_raise_and_remove_a_limit(stack: Stack, login: Any, shots: Any) -> None:
    admin = login("admin")
    admin.goto(stack.url("/limits/?queue=default"))
    assert "has no limits" in admin.inner_text("#limits")
    admin.fill("#limit-add input[name=name]", "warehouse")
    admin.select_option("#limit-add select[name=on]", "resource")
    admin.fill("#limit-add input[name=value]", "warehouse")
    admin.fill("#limit-add input[name=concurrency]", "1")
    admin.click("#limit-add button[type=submit]")
    admin.wait_for_selector(ROW)
    assert "set, on resource=warehouse: concurrency 1" in admin.inner_text("body")

    q = queue(stack)
    q.submit([{"seconds": 4}] * 4, handler="slow", resources=["warehouse"], request_id="wh")
    # The page polls: the cap is reached and held, one task at a time on two free slots.
    until(lambda: "1 / 1 leased" in admin.inner_text(ROW), 20, "the page to show 1 of 1 leased")
    info = read.request(q, "wh")
    assert info is not None and info.leased == 1
    shots(admin, "limits-at-cap")

    admin.fill(f"{ROW} input[name=concurrency]", "2")
    admin.click(f"{ROW} >> text=Change")
    until(lambda: "2 / 2 leased" in admin.inner_text(ROW), 20, "the page to show 2 of 2 leased")

    vera = login("vera")
    vera.goto(stack.url("/limits/?queue=default"))
    assert "resource=warehouse" in vera.inner_text(ROW)
    assert vera.locator(f"{ROW} form").count() == 0 and vera.locator("#limit-add").count() == 0

    admin.click(f"{ROW} >> text=Remove")
    until(lambda: admin.locator(ROW).count() == 0, 10, "the limit to go")
    assert read.limits(q) == []
    q.cancel("wh")

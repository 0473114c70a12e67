"""Search in a real browser (Playwright driving Debian's Chromium) against `manage.py runstack`
(gunicorn, the mirror, a worker): a word of a request's payload, typed into the header's search
box on any page, finds the request after it has finished (its tasks gone from Redis), and its
row opens the request's page."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser_support import Stack, queue, require_browser, running_stack

require_browser()
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("browser-search-var")) as running:
        yield running


def test_a_payload_word_typed_in_the_header_finds_the_request(
    stack: Stack, page: Any, shots: Any
) -> None:
    q = queue(stack)
    rid = q.submit([{"seconds": 0, "invoice": "INV-73310", "customer": "Quetzalcoatl Ltd"}],
                   handler="sleep", tenant="acme").request_id
    other = q.submit([{"seconds": 0, "customer": "Initech"}], handler="sleep").request_id
    assert q.wait(rid, timeout=30) == "done" and q.wait(other, timeout=30) == "done"
    assert not q.redis.exists(q.keys.tasks(rid))  # its payload is gone from Redis
    page.goto(stack.url("/dead/?queue=default"))
    row = page.locator(f'#search-hits tr[data-request="{rid}"]')
    deadline = time.monotonic() + 30
    while True:  # the mirror follows within a second or so
        box = page.locator("#search-box input[name=q]")
        box.fill("quetzalcoatl")
        box.press("Enter")
        page.wait_for_url(re.compile(r".*/search/\?.*q=quetzalcoatl.*"))
        if row.count():
            break
        assert time.monotonic() < deadline, page.content()
        page.wait_for_timeout(500)
    assert page.locator(f'#search-hits tr[data-request="{other}"]').count() == 0
    assert row.locator("mark").inner_text().lower() == "quetzalcoatl"
    assert page.locator("#search-box input[name=q]").input_value() == "quetzalcoatl"
    shots(page, "search")
    row.locator(f"a:text-is('{rid}')").click()
    page.wait_for_url(re.compile(rf".*/requests/default/{rid}/$"))
    page.wait_for_selector("h1 .state.s-done")

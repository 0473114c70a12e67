"""Search in a real browser (Playwright driving Debian's Chromium) against `manage.py runstack`
(gunicorn, the mirror, a worker): a word of a request's payload, typed into the header's search
box on any page, finds the request after it has finished (its tasks gone from Redis), and its
row opens the request's page. And at 1280 px, the search results and the Workers page stay
inside the window (this module's stack has the worker and the mirror that test needs)."""

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


def test_wide_tables_stay_inside_a_1280_px_window(stack: Stack, page: Any, shots: Any) -> None:
    """At 1280 px, the Workers page with workers running tasks and the search results are no
    wider than the window: a wide table scrolls in its own box, the page and its nav bar do
    not."""
    q = queue(stack)
    until(lambda: read.workers(q).items, 60, "the stack's worker to register")
    note = ("customer Quetzalcoatl Ltd, invoice INV-73310, shipped by sea freight from the "
            "warehouse in Rotterdam to the distribution centre in Veracruz")
    rids = [q.submit([{"seconds": 25, "note": note}], handler="sleep", tenant="acme-logistics",
                     request_id=f"nightly-invoice-export-2024-06-{day:02d}").request_id
            for day in (1, 2)]
    until(lambda: sum(getattr(read.request(q, r), "leased", 0) for r in rids) >= 1, 30,
          "the stack's worker to take a task")
    # A second worker, on another host, running both requests' tasks as its heartbeat says.
    now_ms = int(time.time() * 1000)
    q.heartbeat("batch-host-07.eu-west.internal-48213", {
        "host": "batch-host-07.eu-west.internal.example.com", "pid": 48213, "slots": 4,
        "queues": ["default", "exports", "invoices"], "started": now_ms // 1000 - 7200,
        "processed": 18_204, "failed": 12, "dead_after_ms": 60_000, "version": "0.1.0+g1a2b3c4",
        "tasks": [{"queue": "default", "request": r, "task": f"{now_ms - 5000}-{i}",
                   "since": now_ms - 5000} for i, r in enumerate(rids)]})
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(stack.url("/workers/?queue=default"))
    page.locator('tr[data-worker="batch-host-07.eu-west.internal-48213"]').wait_for()
    until(lambda: page.locator("ul.tasks li").count() >= 3, 30, "both workers' tasks")
    shots(page, "workers-1280")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # The stack's own worker's Stop button is in sight without scrolling the table.
    stop = page.locator("#workers-box tr[data-worker] button", has_text="Stop").first
    edge = stop.bounding_box()
    assert edge is not None and edge["x"] + edge["width"] <= 1280, edge
    # Scrolled to its last columns (the Quiet and Stop buttons), the table stays there when
    # the page's poll replaces it.
    box = "document.getElementById('workers-box')"
    left = page.evaluate(f"(() => {{ const b = {box}; b.scrollLeft = b.scrollWidth; "
                         "window.__box = b; return b.scrollLeft; })()")
    assert left > 0
    until(lambda: page.evaluate(f"{box} !== window.__box"), 30, "the page's next poll")
    assert page.evaluate(f"{box}.scrollLeft") == left
    shots(page, "workers-1280-scrolled")
    page.goto(stack.url("/search/?queue=default&q=quetzalcoatl"))
    row = page.locator(f'#search-hits tr[data-request="{rids[0]}"]')
    deadline = time.monotonic() + 30
    while not row.count():  # the mirror indexes the requests within a second or so
        assert time.monotonic() < deadline, page.content()
        page.wait_for_timeout(500)
        page.reload()
    shots(page, "search-1280")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # The matched payload wraps: the whole table, its Matched column too, is in sight.
    assert page.evaluate("document.getElementById('search-hits').getBoundingClientRect().right"
                         " <= window.innerWidth")
    for rid in rids:  # else the stack's stop waits out its grace (7 s) for the 25 s naps
        q.cancel(rid)

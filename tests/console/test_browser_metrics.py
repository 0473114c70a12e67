"""The Handlers page in a real browser (Playwright driving Debian's Chromium) against
`manage.py runstack`: tasks run by the stack's worker show up, through the engine's metrics
and the mirror, as a handler's rows and charts with data; the range picker and the sort
links work."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser_support import Stack, queue, require_browser, running_stack

require_browser()
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    var = tmp_path_factory.mktemp("browser-metrics-var")
    with running_stack(var, {"QA_SPARK": "off"}) as running:
        yield running


def test_a_handlers_chart_renders_with_data(stack: Stack, page: Any, shots: Any) -> None:
    q = queue(stack)
    ok = q.submit([{"seconds": 0.05}] * 8, handler="sleep").request_id
    bad = q.submit([{"message": "no"}] * 3, handler="fail", max_attempts=1).request_id
    assert q.wait(ok, timeout=30) == "done"
    assert q.wait(bad, timeout=30) == "failed"

    page.goto(stack.url("/"))
    page.click("header nav >> text=Handlers")
    page.wait_for_url("**/handlers/**")
    # The mirror rolls the engine's minutes every few seconds; the last hour's page polls.
    page.wait_for_selector("a.handler-name:text-is('sleep')", timeout=30_000)
    page.click("a.handler-name:text-is('sleep')")
    page.wait_for_selector("#handler-charts:text-is('sleep')")
    charts = page.locator("figure.chart")
    assert charts.count() == 2
    # Tasks per minute: the done line has points; run time: p50 and p95 lines.
    assert charts.nth(0).locator("polyline.s-done").count() >= 1
    assert charts.nth(1).locator("polyline.s-p50").count() >= 1
    assert "done 8" in charts.nth(0).locator("figcaption").inner_text()
    row = page.locator("tr", has=page.locator("a.handler-name:text-is('sleep')"))
    assert "8" in row.locator("td").nth(1).inner_text()
    assert "ms" in row.locator("td").nth(7).inner_text()  # p50 of 50 ms naps
    shots(page, "handlers")

    page.click("[data-range='24h']")
    page.wait_for_selector("[data-range='24h'][aria-current='true']")
    assert page.locator("figure.chart").nth(0).locator("polyline.s-done").count() >= 1
    assert "last day" in page.locator("figure.chart figcaption").first.inner_text()

    page.click("th >> text=Failure rate")
    page.wait_for_selector("th[aria-sort] >> text=Failure rate")
    assert page.locator("a.handler-name").first.inner_text() == "fail"
    shots(page, "handlers-by-failure")

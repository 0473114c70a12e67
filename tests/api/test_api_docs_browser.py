"""The API's docs page in a real browser (Chromium through Playwright): Swagger UI loads from
the console's own static files under its Content-Security-Policy (no script error, no CSP
refusal, no request to another site) and lists the endpoints of the schema."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest

from tests.browser_support import CHROMIUM, require_browser

require_browser()
pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def test_the_docs_page_renders_from_local_assets_only(live_server: Any, chromium: Any) -> None:
    page = chromium.new_page()
    errors: list[str] = []
    hosts: set[str] = set()
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("request", lambda r: hosts.add(urlparse(r.url).netloc))
    page.goto(f"{live_server.url}/api/v1/docs")
    page.wait_for_selector(".opblock-summary-path", timeout=20_000)
    paths = page.locator(".opblock-summary-path").all_inner_texts()
    assert any(p.replace("\u200b", "").endswith("/queues/{queue}/requests") for p in paths), paths
    assert page.locator(".opblock").count() >= 20
    assert errors == []
    assert hosts == {urlparse(live_server.url).netloc}

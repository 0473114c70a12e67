"""Unique keys and resources in the console (issue 37): the request page shows a request's
unique key with its scope and the resources it declared; the search box finds a request by its
unique key (the mirror indexes the key its `submitted` event carries); the overview counts the
submits refused as duplicates."""

from __future__ import annotations

import html as htmllib
from typing import Any

import pytest
from django.test import Client

from core.console import search
from core.queue import Queue
from tests.mirror_support import mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def test_the_request_page_shows_its_unique_key_scope_and_resources(viewer: Client,
                                                                   console: Queue) -> None:
    console.submit([1], handler="h", request_id="r1", unique_key="invoice-2041",
                   unique_scope="done+1h", resources=["warehouse", "mailer"])
    console.submit([1], handler="h", request_id="plain")
    html = text(viewer.get("/requests/default/r1/"))
    assert 'id="unique-key"' in html
    key_row = html.split('id="unique-key"')[1].split("</tr>")[0]
    assert "invoice-2041" in key_row and "scope done+3600s" in key_row
    assert "mailer</span>, <span class=\"mono\">warehouse" in html.split('id="resources"')[1]
    plain = text(viewer.get("/requests/default/plain/"))
    assert 'id="unique-key"' not in plain and 'id="resources"' not in plain


def test_search_finds_a_request_by_its_unique_key(viewer: Client, console: Queue) -> None:
    console.submit([{"n": 1}], handler="h", request_id="by-key", unique_key="order-7731")
    console.submit([{"n": 2}], handler="h", request_id="other", unique_key="order-1")
    mirror(console)
    query = search.parse("order-7731")
    assert [h.request_id for h in search.text_matches(query, None).hits] == ["by-key"]
    page = text(viewer.get("/search/?q=order-7731&queue=default"))
    assert 'data-request="by-key"' in page and 'data-request="other"' not in page


def test_the_overview_counts_refused_duplicates(viewer: Client, console: Queue) -> None:
    for _ in range(3):
        console.submit([1], handler="h", unique_key="k")
    html = text(viewer.get("/"))
    row = html.split('data-total="duplicates"')[1].split("</tr>")[0]
    assert "refused duplicates" in row and ">2<" in row

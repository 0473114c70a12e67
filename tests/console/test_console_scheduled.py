"""The console's Scheduled page (issue 19, item 4): delayed requests soonest due first, paged
by (due time, id); run now and cancel from it, permission-checked and audited; the overview
and the strip count them, and what is due in the next hour."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any

import pytest
from django.test import Client

from core.models import AuditEntry
from core.queue import Queue, read
from tests.console_support import field

pytestmark = pytest.mark.django_db


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


@pytest.fixture
def delayed(console: Queue) -> Queue:
    console.submit([1], request_id="in-2h", handler="echo", delay=7_200)
    console.submit([1, 2], request_id="in-5m", handler="echo", delay=300, priority=80)
    console.submit([1], request_id="in-30m", handler="echo", delay=1_800, tenant="acme")
    console.submit([1], request_id="now", handler="echo")
    return console


def ids_on(html: str) -> list[str]:
    return re.findall(r'data-request="([^"]+)"', html)


def test_the_page_lists_delayed_requests_soonest_first(operator: Client, delayed: Queue) -> None:
    html = text(operator.get("/scheduled/"))
    assert ids_on(html) == ["in-5m", "in-30m", "in-2h"]
    assert "3 in all, 2 due in the next hour" in html
    assert ">Run now</button>" in html and ">Cancel…</button>" in html


def test_the_page_is_keyset_paged(operator: Client, console: Queue,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from core.views import scheduled

    monkeypatch.setattr(scheduled, "PAGE", 2)
    for i in range(5):
        console.submit([1], request_id=f"r{i}", handler="echo", delay=60 + i)
    first = text(operator.get("/scheduled/"))
    assert ids_on(first) == ["r0", "r1"]
    after = re.search(r'href="/scheduled/\?[^"]*after=([^"&]+)', first)
    assert after
    second = text(operator.get(f"/scheduled/?after={after.group(1)}"))
    assert ids_on(second) == ["r2", "r3"]
    assert operator.get("/scheduled/?after=junk").status_code == 400


def test_run_now_from_the_page_makes_it_due_and_is_audited(
    operator: Client, delayed: Queue
) -> None:
    page = "/scheduled/"
    html = operator.get(page).content.decode()
    done = operator.post("/actions/run-now/", {"queue": "default", "nonce": field(html, "nonce"),
                                               "next": page, "one": "in-2h"}, follow=True)
    assert "made due now 1 of 1" in text(done)
    assert delayed.state("in-2h") == "active"
    assert ids_on(text(done)) == ["in-5m", "in-30m"]
    entry = AuditEntry.objects.get(action="run-now")
    assert (entry.actor, entry.target, entry.acted, entry.refused) == ("otto", "in-2h", 1, False)
    again = operator.post("/actions/run-now/", {"queue": "default", "one": "in-2h",
                                                "next": page}, follow=True)
    assert "no longer scheduled" in text(again)


def test_cancel_from_the_page_asks_then_nothing_runs(
    operator: Client, delayed: Queue
) -> None:
    data = {"queue": "default", "nonce": field(operator.get("/scheduled/").content.decode(),
                                               "nonce"),
            "next": "/scheduled/", "one": "in-5m"}
    ask = operator.post("/actions/cancel/", data)
    assert "Cancel 1 request?" in text(ask)
    assert delayed.state("in-5m") == "scheduled"
    operator.post("/actions/cancel/", {**data, "confirmed": "1"}, follow=True)
    assert delayed.state("in-5m") == "cancelled"
    assert delayed.run_now("in-5m") == ("cancelled", False)
    assert AuditEntry.objects.filter(action="cancel", target="in-5m", acted=1).exists()
    assert read.stats(delayed).scheduled == 2


def test_a_viewer_sees_no_button_and_a_forged_post_is_refused_and_audited(
    viewer: Client, delayed: Queue
) -> None:
    html = text(viewer.get("/scheduled/"))
    assert ids_on(html) == ["in-5m", "in-30m", "in-2h"]
    assert ">Run now</button>" not in html and ">Cancel…</button>" not in html
    response = viewer.post("/actions/run-now/", {"queue": "default", "one": "in-2h"})
    assert response.status_code == 403
    assert delayed.state("in-2h") == "scheduled"
    assert AuditEntry.objects.filter(action="run-now", refused=True, actor="vera").exists()


def test_the_overview_shows_what_is_due_in_the_next_hour(
    viewer: Client, delayed: Queue
) -> None:
    html = text(viewer.get("/"))
    row = re.search(r'id="due-next-hour"><th>Due in the next hour</th>'
                    r'<td class="n"><a [^>]*>(\d+)<', html)
    assert row and row.group(1) == "2"
    assert re.search(r"<b>3</b> scheduled", html)  # the strip

"""The console's Limits page (issue 37): every account reads the queue's limits with their use
against each cap (tasks leased now, starts in the window), refreshed live; admins add, change
and remove them, each change one audit entry; anyone else's POST is refused (403, audited);
bad input is a 400 that says what is wrong."""

from __future__ import annotations

import html as htmllib
from typing import Any

import pytest
from django.test import Client

from core.models import AuditEntry
from core.queue import Queue, read

pytestmark = pytest.mark.django_db


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def row(html: str, name: str) -> str:
    start = html.index(f'data-limit="{name}"')
    return html[start:html.index("</tr>", start)]


def test_every_account_reads_each_limits_use_against_its_cap(viewer: Client,
                                                             console: Queue) -> None:
    console.set_limit("reports", on="handler", value="report", rate=10, per=60, concurrency=2)
    console.submit([1, 2, 3], handler="report")
    assert len(console.dequeue("w", 10)) == 2

    response = viewer.get("/limits/")
    assert response.status_code == 200
    html = text(response)
    r = row(html, "reports")
    assert "handler=report" in r
    assert "2 / 2 leased" in r and 'class="p-dead" x="0" y="0" width="100"' in r  # at its cap
    assert "2 / 10 started in 1m" in r and 'width="20"' in r
    assert "<form" not in html.split('id="limits"')[1].split("</table>")[0]  # reads only
    assert 'id="limit-add"' not in html
    assert 'href="/limits/?queue=default"' in text(viewer.get("/"))  # in the navigation

    # Live: the poll's fragment shows the use as it is now.
    assert console.dequeue("w", 10) == []  # the third is held back
    polled = viewer.get("/limits/", HTTP_HX_REQUEST="true", HTTP_HX_TARGET="live")
    assert polled.status_code == 200 and "2 / 2 leased" in text(polled)
    assert "<html" not in text(polled)


def test_an_admin_adds_changes_and_removes_a_limit(admin: Client, console: Queue) -> None:
    done = admin.post("/limits/change/", {"queue": "default", "name": "acme", "on": "tenant",
                                          "value": "acme", "rate": "", "concurrency": "1"},
                      follow=True)
    assert done.status_code == 200
    assert "Limit acme of queue default set, on tenant=acme: concurrency 1" in text(done)
    assert [(u.limit.on, u.limit.value, u.limit.concurrency) for u in read.limits(console)] == [
        ("tenant", "acme", 1)]
    entry = AuditEntry.objects.get(action="limit-set")
    assert (entry.actor, entry.source, entry.queue) == ("ada", "console", "default")

    html = text(admin.get("/limits/"))
    assert 'id="limit-add"' in html and "Change</button>" in row(html, "acme")
    admin.post("/limits/change/", {"queue": "default", "name": "acme", "on": "tenant",
                                    "value": "acme", "rate": "5/1s", "concurrency": "3"})
    (use,) = read.limits(console)
    assert (use.limit.rate, use.limit.per_ms, use.limit.concurrency) == (5, 1000, 3)

    gone = admin.post("/limits/change/", {"queue": "default", "name": "acme",
                                          "action": "remove"}, follow=True)
    assert "Limit acme of queue default removed" in text(gone)
    assert read.limits(console) == []
    assert AuditEntry.objects.filter(action="limit-remove", acted=1).count() == 1
    audit = admin.get("/audit/?action=limit-set")
    assert audit.status_code == 200 and "limit acme" in text(audit)


@pytest.mark.parametrize(("post", "says"), [
    ({"name": "x", "on": "handler", "value": "", "rate": "1/1s"}, "name the handler"),
    ({"name": "x", "on": "handler", "value": "h", "rate": "fast"}, "say N/PERIOD"),
    ({"name": "x", "on": "handler", "value": "h"}, "give a rate (N/PERIOD), a concurrency"),
    ({"name": "", "on": "queue", "rate": "1/1s"}, "limit name"),
    ({"name": "x", "on": "moon", "rate": "1/1s"}, "a limit is on"),
    ({"name": "x", "on": "queue", "concurrency": "-1"}, "1 to 1,000,000"),
])
def test_bad_input_is_a_400_saying_what_is_wrong(admin: Client, console: Queue,
                                                 post: dict[str, str], says: str) -> None:
    response = admin.post("/limits/change/", {"queue": "default", **post})
    assert response.status_code == 400
    assert says in text(response) and 'id="limits-error"' in text(response)
    assert read.limits(console) == []


@pytest.mark.parametrize("who", ["viewer", "operator"])
def test_only_admins_change_limits(who: str, request: Any, console: Queue) -> None:
    client = request.getfixturevalue(who)
    response = client.post("/limits/change/", {"queue": "default", "name": "x", "on": "queue",
                                                "rate": "1/1s"})
    assert response.status_code == 403
    assert read.limits(console) == []
    assert AuditEntry.objects.get(action="limit-set").refused


def test_an_unknown_queue_is_a_404(viewer: Client, console: Queue) -> None:
    assert viewer.get("/limits/?queue=nope").status_code == 404


def test_a_field_limit_shows_its_caps_per_value(viewer: Client, console: Queue) -> None:
    console.set_limit("per-customer", on="field", value="customer", rate=10, concurrency=2)
    r = row(text(viewer.get("/limits/")), "per-customer")
    words = " ".join(r.replace('<span class="muted">', "").replace("</span>", "").split())
    assert "at most 2 leased per value of customer" in words
    assert "at most 10/1s started per value of customer" in words
    assert "<svg" not in r

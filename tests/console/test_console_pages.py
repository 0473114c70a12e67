"""Every console page and its polled fragment: who may see it, what it shows."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from core.queue import Queue
from tests.console_support import Seeded

pytestmark = pytest.mark.django_db


def pages(s: Seeded) -> list[str]:
    return [
        "/",
        "/?queue=default",
        "/requests/",
        "/requests/?state=failed&tenant=acme&priority=70&handler=echo&sort=created",
        "/requests/?id=run&sort=finished&since=2020-01-01&until=2099-01-01",
        f"/requests/default/{s.running}/",
        f"/requests/default/{s.failed}/",
        f"/requests/default/{s.history}/",
        "/pending/",
        "/dead/",
        "/dead/?handler=x&tenant=y&request=bad-1&since=2020-01-01",
        f"/dead/default/{s.fingerprint}/",
        "/workers/",
    ]


def test_every_page_sends_anonymous_visitors_to_log_in(client: Client, seeded: Seeded) -> None:
    for url in pages(seeded):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/?next="), url


def test_every_page_and_fragment_answers_a_viewer(viewer: Client, seeded: Seeded) -> None:
    for url in pages(seeded):
        full = viewer.get(url)
        assert full.status_code == 200, (url, full.content[:500])
        html = full.content.decode()
        assert "<nav>" in html and 'id="live"' in html, url
        fragment = viewer.get(url, headers={"HX-Request": "true", "HX-Target": "live"})
        assert fragment.status_code in (200, 286), url
        body = fragment.content.decode()
        assert body.lstrip().startswith('<section id="live"'), url
        assert "<nav>" not in body, url


def test_a_user_without_the_permission_gets_403(nobody: Client, seeded: Seeded) -> None:
    for url in pages(seeded):
        response = nobody.get(url)
        assert response.status_code == 403, url
        assert "viewer or operator group" in response.content.decode()


def test_an_operator_sees_the_pages_too(operator: Client, seeded: Seeded) -> None:
    assert operator.get("/").status_code == 200


def test_get_only(viewer: Client, seeded: Seeded) -> None:
    assert viewer.post("/requests/").status_code == 405


def test_overview_shows_depths_workers_anomalies_charts_and_redis(
    viewer: Client, seeded: Seeded, console: Queue
) -> None:
    html = viewer.get("/").content.decode()
    assert "Queues" in html and "priority 70" in html
    assert "<polyline" in html and "last hour" in html and "last day" in html
    assert "Connected clients" in html
    assert "Dead letters" in html


def test_a_new_queues_overview_says_nothing_was_submitted_yet(
    viewer: Client, console: Queue
) -> None:
    html = viewer.get("/").content.decode()
    assert "Since the queue began" in html and "Nothing submitted to this queue yet." in html
    console.submit([1], handler="echo")
    assert "Nothing submitted to this queue yet." not in viewer.get("/").content.decode()


def test_overview_flags_work_without_workers_and_expired_leases(
    viewer: Client, console: Queue
) -> None:
    console.submit([1, 2, 3], handler="echo", lease_ms=100)
    console.dequeue("ghost", 1)
    import time

    time.sleep(0.15)  # the lease expires; nothing reaps it (no worker runs)
    html = viewer.get("/").content.decode()
    assert "2 tasks wait and no worker is live" in html
    assert "1 lease is past its expiry and not recovered yet" in html


def test_requests_list_filters_and_progress(viewer: Client, seeded: Seeded) -> None:
    html = viewer.get("/requests/?state=failed").content.decode()
    assert "bad-1" in html and "run-1" not in html
    html = viewer.get("/requests/?id=run-1").content.decode()
    assert "run-1" in html and "bad-1" not in html
    html = viewer.get("/requests/").content.decode()
    assert '<rect class="p-leased"' in html  # run-1's leased task, live from Redis
    html = viewer.get("/requests/?sort=finished").content.decode()
    assert "old-1" in html and "run-1" not in html


def test_requests_pages_by_keyset(viewer: Client, console: Queue, db: Any) -> None:
    import datetime as dt

    from django.utils import timezone

    from core.models import Request

    now = timezone.now()
    for i in range(120):
        Request.objects.create(queue="default", request_id=f"r{i:03d}", state="done",
                               created_at=now - dt.timedelta(seconds=i % 7), updated_at=now)
    seen: list[str] = []
    url = "/requests/"
    while url:
        response = viewer.get(url)
        rows = response.context["rows"]
        seen += [r.id for r in rows]
        paged = response.context["paged"]
        url = f"/requests/?after={paged.next}" if paged.next else ""
    assert sorted(seen) == [f"r{i:03d}" for i in range(120)]


def test_a_live_page_polls_at_the_interval_set(viewer: Client, seeded: Seeded,
                                                settings: Any) -> None:
    html = viewer.get("/").content.decode()
    assert 'hx-trigger="every 3s"' in html and "every 3 seconds" in html  # the default
    settings.CONSOLE_POLL_S = 1.5  # QA_CONSOLE_POLL_S=1.5
    html = viewer.get(f"/requests/default/{seeded.running}/").content.decode()
    assert 'hx-trigger="every 1.5s"' in html and "updating every 1.5 s" in html


def test_request_detail_shows_pending_timeline_letters_and_payloads(
    viewer: Client, seeded: Seeded
) -> None:
    html = viewer.get(f"/requests/default/{seeded.running}/").content.decode()
    assert "w-1" in html and "submitted" in html
    assert "waiting" in html or "Nothing pending" not in html
    html = viewer.get(f"/requests/default/{seeded.failed}/").content.decode()
    assert "ValueError" in html and "dead" in html
    response = viewer.get(f"/requests/default/{seeded.failed}/",
                          headers={"HX-Request": "true", "HX-Target": "live"})
    assert response.status_code == 286  # final: htmx stops polling
    assert "hx-trigger" not in response.content.decode()
    html = viewer.get(f"/requests/default/{seeded.history}/").content.decode()
    assert "no longer holds this request" in html


def test_a_held_follow_up_says_which_request_it_waits_for(
    viewer: Client, console: Queue
) -> None:
    console.submit([{"n": 1}], handler="echo", request_id="parent-1", max_attempts=1)
    console.submit_after("parent-1", [{"n": 2}], handler="echo", request_id="then-1")

    def note() -> str:
        html = viewer.get("/requests/default/then-1/").content.decode()
        m = re.search(r'<p class="lede" id="held-note">(.*?)</p>', html, re.S)
        assert m is not None, html
        assert 'href="/requests/default/parent-1/"' in m.group(1)
        return " ".join(re.sub(r"<[^>]+>", "", m.group(1)).split())

    assert note() == ("Held behind request parent-1: it runs when that one is done. If that one "
                      "fails, it stays held until that request's dead letters are requeued and "
                      "it finishes, or until this one is cancelled.")
    [lease] = console.dequeue("w-1", 1)
    console.fail(lease, "ValueError: bad row")
    assert console.state("parent-1") == "failed" and console.state("then-1") == "held"
    assert note() == ("Held behind request parent-1, which failed: it stays held until that "
                      "request's dead letters are requeued and it finishes, or until this one "
                      "is cancelled.")
    # Only a held request says so.
    assert 'id="held-note"' not in viewer.get("/requests/default/parent-1/").content.decode()


def concurrency_shown(viewer: Client, rid: str) -> str:
    html = viewer.get(f"/requests/default/{rid}/").content.decode()
    m = re.search(r"<tr><th>Concurrency</th><td>([^<]*)</td></tr>", html)
    assert m is not None, html
    return m.group(1)


def test_a_request_without_a_concurrency_limit_says_no_limit(
    viewer: Client, console: Queue
) -> None:
    console.submit([{"n": 1}], handler="echo", request_id="free")
    console.submit([{"n": 1}], handler="echo", request_id="capped", concurrency=3)
    assert concurrency_shown(viewer, "free") == "no limit"
    assert concurrency_shown(viewer, "capped") == "3"


def test_counts_of_one_are_singular(viewer: Client, seeded: Seeded, console: Queue) -> None:
    html = viewer.get(f"/dead/default/{seeded.fingerprint}/").content.decode()
    assert "<b>3</b> letters from 1 request of 1 tenant, first" in html
    assert "· 1 attempt ·" in html and "1 attempts" not in html
    assert "3 dead letters in the history" in viewer.get("/dead/").content.decode()
    # A dead letter the mirror has not copied yet: the request's page reads it from Redis.
    console.submit([{"n": 1}], handler="echo", request_id="one-dead", max_attempts=1,
                   priority=99)  # leased before the seeded requests' tasks
    [lease] = console.dequeue("w-1", 1)
    console.fail(lease, "ValueError: bad row")
    html = viewer.get("/requests/default/one-dead/").content.decode()
    assert re.search(r'<tr id="dead-[0-9-]+"><td class="mono">[0-9-]+</td><td><pre class="text">'
                     r"ValueError: bad row</pre>", html)


def test_pending_page_lists_leases_and_flags_dead_consumers(
    viewer: Client, seeded: Seeded
) -> None:
    response = viewer.get("/pending/")
    entries = response.context["entries"]
    assert [(e.request_id, e.consumer) for e in entries] == [(seeded.running, "w-1")]
    assert entries[0].consumer_state == "alive"


def test_pending_page_pages_through_every_lease(viewer: Client, console: Queue) -> None:
    console.submit(list(range(130)), handler="echo", concurrency=200)
    console.dequeue("w-a", 130)  # one call: one expiry shared by all 130
    seen: list[str] = []
    url = "/pending/"
    while url:
        response = viewer.get(url)
        assert response.status_code == 200, response.content.decode()[-800:]
        seen += [e.task_id for e in response.context["entries"]]
        nxt = response.context["paged"].next
        url = f"/pending/?after={nxt}" if nxt else ""
    assert len(seen) == len(set(seen)) == 130
    assert {e for e in seen} and response.context["entries"][0].consumer_state == "gone"


def test_dead_letter_groups_and_a_group(viewer: Client, seeded: Seeded) -> None:
    response = viewer.get("/dead/")
    [group] = response.context["groups"]
    assert group["count"] == 3 and group["requests"] == 1
    html = viewer.get(f"/dead/default/{seeded.fingerprint}/").content.decode()
    assert html.count('class="letter"') == 3
    assert viewer.get("/dead/?handler=nothing").context["groups"] == []


def test_workers_page_states_and_current_tasks(viewer: Client, seeded: Seeded) -> None:
    response = viewer.get("/workers/")
    [w] = response.context["workers"]
    assert (w.name, w.state, w.processed, w.failed, w.version) == ("w-1", "alive", 12, 1, "0.1.0")
    assert [t.request_id for t in w.tasks] == ["run-1"]
    html = response.content.decode()
    assert "run-1" in html and "0.1.0" in html


def test_links_work_without_javascript(viewer: Client, seeded: Seeded) -> None:
    """Every hx-get has the same href beside it."""
    import re

    for url in pages(seeded):
        html = viewer.get(url).content.decode()
        for tag in re.findall(r"<a [^>]*hx-get=[^>]*>", html):
            href = re.search(r'href="([^"]*)"', tag)
            get = re.search(r'hx-get="([^"]*)"', tag)
            assert href and get and href.group(1) == get.group(1), tag


def test_every_registered_queue_is_listed_and_can_be_picked(
    viewer: Client, seeded: Seeded, settings: Any
) -> None:
    from core.conf import get_queue

    other = get_queue("reports")
    other.submit([{"r": 1}], handler="export", request_id="monthly")  # registers "reports"
    html = viewer.get("/").content.decode()
    assert '<option value="reports">reports</option>' in html
    assert "?queue=reports" in html
    response = viewer.get("/?queue=reports")
    assert response.status_code == 200
    assert response.context["current"].stats.waiting == 1
    assert viewer.get("/requests/reports/monthly/").status_code == 200


def test_pending_pages_go_on_when_the_cursors_lease_is_gone(
    viewer: Client, console: Queue
) -> None:
    console.submit(list(range(120)), handler="echo", concurrency=200)
    leases = {lease.lease: lease for lease in console.dequeue("w-a", 120)}  # one expiry
    first = viewer.get("/pending/")
    seen = [e.token for e in first.context["entries"]]
    console.ack(leases[seen[-1]])  # the cursor's own lease leaves the index
    rest = viewer.get(f"/pending/?after={first.context['paged'].next}")
    assert rest.status_code == 200
    seen += [e.token for e in rest.context["entries"]]
    nxt = rest.context["paged"].next
    seen += [e.token for e in viewer.get(f"/pending/?after={nxt}").context["entries"]]
    assert len(seen) == len(set(seen)) == 120

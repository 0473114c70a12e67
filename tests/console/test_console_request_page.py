"""What a request's page says, exactly (issue 33, items 8 to 10): every event of the request
in time order, each completion in its own state; counts that agree everywhere on the page
right after an action, and only the actions that apply; a progress figure that counts what
running tasks report of themselves, with each segment of the bar labelled."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from core.models import Request
from core.queue import Queue
from tests.console_support import fail_tasks
from tests.mirror_support import mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]
POLL = {"HX-Request": "true", "HX-Target": "live"}


def timeline(html: str) -> list[str]:
    """The kinds of the events the page's timeline lists, top to bottom."""
    m = re.search(r'<ol class="timeline"[^>]*>(.*?)</ol>', html, re.S)
    assert m, "no timeline on the page"
    return re.findall(r'<span class="ev[^"]*">(\w+)</span>', m.group(1))


def strip(html: str) -> dict[str, int]:
    """The queue's figures in the strip under the navigation."""
    m = re.search(r'<div class="strip" id="strip".*?</div>', html, re.S)
    assert m, "no strip on the page"
    text = re.sub(r"<[^>]+>", "", m.group(0))
    return {name: int(n) for n, name in re.findall(r"(\d+) (waiting|leased|delayed|dead)", text)}


def counter(html: str, name: str) -> int:
    m = re.search(rf'</i>{name}</th><td class="n">(\d+)</td>', html)
    assert m, f"no {name} counter on the page"
    return int(m.group(1))


def test_the_timeline_lists_every_event_in_order_after_the_stream_lost_them(
    viewer: Client, console: Queue
) -> None:
    q = console
    rid = q.submit([{"row": 1}], request_id="twice", handler="h", max_attempts=2,
                   backoff_ms=0).request_id
    for _ in range(2):  # a retry, then dead: failed
        [lease] = q.dequeue("w1", 1)
        q.fail(lease, "ValueError: row 1", worker="w1")
    mirror(q)
    q.requeue_request(rid)  # reopened; it fails again the same way
    [lease] = q.dequeue("w2", 1)
    q.release([lease])  # its worker stopped: given back
    for _ in range(2):
        [lease] = q.dequeue("w1", 1)
        q.fail(lease, "ValueError: row 1", worker="w1")
    mirror(q)
    q.redis.xtrim(q.keys.events, maxlen=0)  # the capped stream no longer has them

    html = viewer.get(f"/requests/default/{rid}/").content.decode()
    assert timeline(html) == ["submitted", "retried", "dead", "completed", "reopened",
                              "requeued", "released", "retried", "dead", "completed"]
    # Each completion in its state's colour: failed, not done's green.
    completions = re.findall(r'<li class="t-(\w+)" data-kind="completed">', html)
    assert completions == ["failed", "failed"]
    assert "failed: 0 done, 1 dead, 0 cancelled" in html


def test_events_the_mirror_has_not_written_yet_come_from_the_stream_once(
    viewer: Client, console: Queue
) -> None:
    q = console
    rid = q.submit([{"row": 1}], request_id="fresh", handler="h", max_attempts=1).request_id
    mirror(q)
    [lease] = q.dequeue("w1", 1)
    q.fail(lease, "ValueError: row 1", worker="w1")  # not mirrored yet
    html = viewer.get(f"/requests/default/{rid}/").content.decode()
    assert timeline(html) == ["submitted", "dead", "completed"]


def test_right_after_a_requeue_the_strip_the_counters_and_the_letters_agree(
    admin: Client, console: Queue, settings: Any
) -> None:
    q = console
    settings.CONSOLE_CACHE_S = 60  # as in production: the strip's figures are cached
    rid = q.submit([{"row": i} for i in range(3)], request_id="bad-3", handler="h",
                   max_attempts=1).request_id
    fail_tasks(q, rid, 3)
    mirror(q)
    html = admin.get(f"/requests/default/{rid}/").content.decode()
    assert strip(html)["dead"] == counter(html, "Dead") == 3
    assert len(re.findall(r'<tr id="dead-', html)) == 3
    assert "Delete its dead letters…" in html and "Requeue its 3 dead tasks" in html

    assert q.requeue_request(rid) == 3  # the mirror has not seen it yet
    for page in (admin.get(f"/requests/default/{rid}/"),
                 admin.get(f"/requests/default/{rid}/", headers=POLL)):
        html = page.content.decode()
        assert strip(html)["dead"] == counter(html, "Dead") == 0
        assert strip(html)["waiting"] == counter(html, "Waiting") == 3
        assert '<tr id="dead-' not in html  # the requeued letters are not listed
        assert "Delete its dead letters" not in html and "Requeue its" not in html


def test_a_request_being_cancelled_offers_no_cancel(admin: Client, console: Queue) -> None:
    q = console
    rid = q.submit([{"n": 1}, {"n": 2}], request_id="stopping", handler="h").request_id
    q.dequeue("w1", 1)
    assert "Cancel this request…" in admin.get(f"/requests/default/{rid}/").content.decode()
    q.cancel(rid)  # one task still runs: cancelling
    html = admin.get(f"/requests/default/{rid}/").content.decode()
    assert 'class="state s-cancelling"' in html
    assert "Cancel this request" not in html
    assert "1 running task is told to stop" in html


def test_the_progress_figure_counts_what_running_tasks_report(
    viewer: Client, console: Queue
) -> None:
    q = console
    rid = q.submit([{"n": i} for i in range(2)], request_id="busy", handler="h").request_id
    a, b = q.dequeue("w1", 2)
    q.progress(a, done=1, total=4, worker="w1")
    q.progress(b, done=3, total=10, worker="w1")
    html = viewer.get(f"/requests/default/{rid}/").content.decode()
    bar = re.search(r'<div class="progress-wide"[^>]*>(.*?)</div>', html, re.S)
    assert bar
    # (0.25 + 0.30) of 2 tasks: 27 %, not the 0 % of the tasks finished.
    assert '">27%</span>' in bar.group(1)
    segments = re.findall(r'data-segment="(\w+)"><i class="k k-\w+"></i>([\d,]+) (\w+)</span>',
                          bar.group(1))
    assert segments == [("leased", "2", "running")]
    # The requests list says the same of it.
    Request.objects.create(queue="default", request_id=rid, state="active", total=2,
                           created_at=timezone.now(), updated_at=timezone.now())
    row = re.search(rf'<tr id="request-{rid}".*?</tr>', viewer.get("/requests/").content.decode(),
                    re.S)
    assert row and '">27%</span>' in row.group(0) and "2 running</span>" in row.group(0)
    q.ack(a)
    html = viewer.get(f"/requests/default/{rid}/").content.decode()
    bar = re.search(r'<div class="progress-wide"[^>]*>(.*?)</div>', html, re.S)
    assert bar and '">65%</span>' in bar.group(1)  # 1 done + 0.30 of 2
    assert re.findall(r'data-segment="(\w+)"', bar.group(1)) == ["done", "leased"]

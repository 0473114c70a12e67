"""Totals survive pruning (issue 35, item 3): the overview's "since the queue began", /metrics'
counters and the Handlers page's totals since metrics began read kept aggregates (the engine's
counters in Redis, HandlerTotal), never counts of the rows the pruner removes; and the
Handlers page's last day still adds up when the minute rows are kept for less than a day."""

from __future__ import annotations

import datetime as dt
import html as htmllib
import re
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from core.mirror.metrics import roll
from core.mirror.retention import Policy, Value, load
from core.mirror.retention_prune import prune
from core.models import (
    HandlerHour,
    HandlerMinute,
    HandlerTotal,
    Request,
    RequestEvent,
    RetentionSetting,
    SearchDoc,
)
from core.queue import Queue
from tests.mirror_support import mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]
TOKEN = "totals-token"


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def since_began(html: str) -> str:
    part = html.split("Since the queue began", 1)[1]
    return part[:part.index("</table>")]


def counters(client: Client) -> list[str]:
    body = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    return sorted(line for line in body.splitlines()
                  if re.match(r"queueadmin_(tasks|handler_tasks)_total\{", line))


def handler_cells(html: str, handler: str) -> list[str]:
    start = html.index(f'class="handler-name">{handler}</a>')
    row = html[start:html.index("</tr>", start)]
    return re.findall(r'<td class="n[^"]*">([^<]*)</td>', row)


def test_the_totals_read_the_same_after_everything_prunable_is_gone(
        viewer: Client, console: Queue, settings: Any) -> None:
    settings.METRICS_TOKEN = TOKEN
    q = console
    for i in range(4):
        q.submit([{"n": j} for j in range(3)], handler="resize", request_id=f"r{i}")
    q.submit([{"n": 0}], handler="resize", request_id="bad", max_attempts=1)
    leases = q.dequeue("w", 100)
    q.ack_many([lease for lease in leases if lease.request_id != "bad"],
               durations=[0.02] * 12)
    q.fail(next(lease for lease in leases if lease.request_id == "bad"), "ValueError: no",
           retry=False, duration=0.5)
    mirror(q)
    roll(q)
    overview = since_began(text(viewer.get("/")))
    metrics = counters(viewer)
    handlers = handler_cells(text(viewer.get("/handlers/?range=all")), "resize")
    assert ">13<" in overview.replace(" ", "")  # 13 submitted
    assert handlers[:3] == ["12", "1", "0"]
    assert any('outcome="done"' in m and m.endswith(" 12.0") for m in metrics), metrics

    gone = Policy({kind: Value(1, "test") for kind in load().defaults})
    report = prune(now=timezone.now() + dt.timedelta(days=400), policy=gone)

    assert report.removed["requests"] == 5 and not Request.objects.exists()
    assert not RequestEvent.objects.exists() and not SearchDoc.objects.exists()
    assert since_began(text(viewer.get("/"))) == overview
    assert counters(viewer) == metrics
    assert handler_cells(text(viewer.get("/handlers/?range=all")), "resize") == handlers
    assert HandlerTotal.objects.get(handler="resize").done == 12


def test_the_last_day_adds_up_when_minutes_are_kept_an_hour(viewer: Client,
                                                            console: Queue) -> None:
    now = timezone.now()
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    three_ago = this_hour - dt.timedelta(hours=3)
    # Three hours ago: its minutes pruned (an hour of them is kept), its hour row kept.
    HandlerHour.objects.create(queue="default", handler="resize", hour=three_ago, done=10)
    # The last minutes, in their minute rows and their hour.
    recent = now.replace(second=0, microsecond=0) - dt.timedelta(minutes=1)
    HandlerMinute.objects.create(queue="default", handler="resize", minute=recent, done=2)
    HandlerHour.objects.create(queue="default", handler="resize",
                               hour=recent.replace(minute=0), done=2)
    RetentionSetting.objects.create(kind="handler-minutes", queue="", seconds=3600)

    html = text(viewer.get("/handlers/?range=24h"))

    assert handler_cells(html, "resize")[0] == "12"
    assert "Minute rows are kept 1h" in html
    html = text(viewer.get("/handlers/?range=90d"))
    assert "range-short" not in html
    RetentionSetting.objects.create(kind="handler-hours", queue="", seconds=7 * 86400)
    assert "Hour rows of queue default are kept 7d" in text(viewer.get("/handlers/?range=90d"))

"""The Handlers page and the handlers' series on /metrics (issue 20), from metrics the engine
counted in the suite's Redis and the mirror rolled into the test database."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from core.console.charts import draw
from core.console.handlers import RANGES, table
from core.mirror.metrics import roll
from core.models import HandlerHour
from core.queue import Queue
from core.queue.metrics import HandlerCounts
from tests.console_support import HOSTILE

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]


def run(q: Queue, handler: str, n: int, seconds: float, *, fail: bool = False) -> None:
    q.submit([0] * n, handler=handler, max_attempts=1)
    leases = q.dequeue("w", n)
    if fail:
        for lease in leases:
            q.fail(lease, "boom", duration=seconds)
    else:
        q.ack_many(leases, durations=[seconds] * n)


@pytest.fixture
def counted(console: Queue) -> Queue:
    """Three handlers: `slow` spends the most time, `flaky` fails most, `quick` does most."""
    run(console, "quick", 40, 0.002)
    run(console, "slow", 3, 20.0)
    run(console, "flaky", 4, 0.3)
    run(console, "flaky", 4, 0.3, fail=True)
    roll(console)
    return console


def names(html: str) -> list[str]:
    return re.findall(r'class="handler-name">([^<]+)<', html)


def test_the_page_needs_a_login(client: Client, console: Queue) -> None:
    response = client.get("/handlers/")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_handlers_are_listed_sorted_by_time_failure_p95_and_name(
    viewer: Client, counted: Queue
) -> None:
    page = viewer.get("/handlers/")
    assert page.status_code == 200
    html = page.content.decode()
    assert names(html) == ["slow", "flaky", "quick"]  # time spent, the default
    assert names(viewer.get("/handlers/?sort=failure").content.decode())[0] == "flaky"
    assert names(viewer.get("/handlers/?sort=p95").content.decode())[0] == "slow"
    assert names(viewer.get("/handlers/?sort=done").content.decode())[0] == "quick"
    assert names(viewer.get("/handlers/?sort=name").content.decode()) == [
        "flaky", "quick", "slow"]
    assert "50.0 %" in html  # flaky: 4 of 8 failed
    # The first handler's charts are drawn: tasks and run-time lines, with the data.
    assert '<h2 id="handler-charts">slow</h2>' in html
    assert html.count('<figure class="chart">') == 2
    assert 'class="s-done"' in html and 'class="s-p95"' in html
    assert 'href="/handlers/?queue=default' in html  # the navigation links the page


def test_one_handlers_charts_over_each_range(viewer: Client, counted: Queue) -> None:
    for name in RANGES:
        html = viewer.get(f"/handlers/?handler=flaky&range={name}").content.decode()
        assert '<h2 id="handler-charts">flaky</h2>' in html, name
        assert 'polyline class="s-failed"' in html, name
        assert 'aria-current="true" data-range="' + name in html


def test_bad_parameters_are_a_400(viewer: Client, console: Queue) -> None:
    assert viewer.get("/handlers/?range=5y").status_code == 400
    assert viewer.get("/handlers/?sort=drop").status_code == 400
    assert viewer.get("/handlers/?handler=" + "x" * 300).status_code == 400


def test_an_unknown_handler_is_shown_empty_and_escaped(
    viewer: Client, counted: Queue
) -> None:
    response = viewer.get("/handlers/", {"handler": HOSTILE})
    assert response.status_code == 200
    assert HOSTILE not in response.content.decode()
    assert "Nothing of" in response.content.decode()


def test_long_ranges_read_hour_rows(console: Queue) -> None:
    from django.utils import timezone

    now = timezone.now()
    c = HandlerCounts(done=10, failed=10)
    c.buckets[5] = 20
    HandlerHour.objects.create(queue="default", handler="old", hour=now.replace(
        minute=0, second=0, microsecond=0) - RANGES["7d"].span / 2, done=c.done,
        failed=c.failed, buckets=c.buckets, run_us=1000)
    assert [r.handler for r in table("default", RANGES["7d"], now)] == ["old"]
    assert table("default", RANGES["1h"], now) == []


def test_a_chart_with_gaps_draws_its_runs_apart() -> None:
    import datetime as dt

    from core.console.charts import Bucket

    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    data = [Bucket(start + dt.timedelta(minutes=i), {"p50": v}) for i, v in
            enumerate([1.0, None, 2.0, 3.0])]
    chart = draw("t", data, dt.timedelta(minutes=1), unit="run time, ms", totals=False)
    assert len(chart.lines[0].paths) == 2 and not chart.empty


def test_metrics_has_the_handlers_histograms_and_counters(
    client: Client, counted: Queue, settings: Any
) -> None:
    settings.METRICS_TOKEN = "t"
    text = client.get("/metrics", headers={"Authorization": "Bearer t"}).content.decode()
    assert ('queueadmin_handler_tasks_total{handler="flaky",outcome="failed",queue="default"} '
            '4.0') in text
    assert ('queueadmin_handler_tasks_total{handler="quick",outcome="done",queue="default"} '
            '40.0') in text
    assert ('queueadmin_task_duration_seconds_bucket{handler="quick",le="0.0025",'
            'queue="default"} 40.0') in text
    assert ('queueadmin_task_duration_seconds_bucket{handler="slow",le="10",'
            'queue="default"} 0.0') in text
    assert ('queueadmin_task_duration_seconds_bucket{handler="slow",le="+Inf",'
            'queue="default"} 3.0') in text
    assert 'queueadmin_task_duration_seconds_count{handler="flaky",queue="default"} 4.0' in text
    assert 'queueadmin_task_duration_seconds_sum{handler="slow",queue="default"} 60.0' in text
    # The queue's own counters are there as before.
    assert 'queueadmin_tasks_total{outcome="done",queue="default"} 47.0' in text

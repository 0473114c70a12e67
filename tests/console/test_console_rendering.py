"""The console's one way to show a time, a payload, a progress bar, and the chart rates."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Any

import pytest

from core.console import charts
from core.models import QueueSample
from core.templatetags.console import ago, console_nav, duration, payload, progress


def test_ago_says_how_long_ago_with_the_exact_utc_time_on_hover() -> None:
    ms = int(time.time() * 1000) - 185_000
    html = str(ago(ms))
    exact = dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
    assert ">3 min 5 s ago</time>" in html
    assert f'title="{exact:%Y-%m-%d %H:%M:%S}.' in html and ' UTC"' in html
    ahead = str(ago(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)))
    assert ahead.endswith(("in 29 s</time>", "in 30 s</time>"))
    assert "—" in str(ago(None))


@pytest.mark.parametrize(("ms", "text"), [(850, "850 ms"), (42_000, "42 s"),
                                          (184_000, "3 min 4 s"), (7_500_000, "2 h 5 min"),
                                          (277_000_000, "3 d 4 h")])
def test_durations(ms: int, text: str) -> None:
    assert duration(ms) == text


class _User:
    def __init__(self, *perms: str) -> None:
        self.perms = perms

    def has_perm(self, perm: str) -> bool:
        return perm in self.perms


def test_the_navigation_links_every_page_for_the_queue_and_marks_the_current_one() -> None:
    nav = str(console_nav({"user": _User("core.manage_alerts")}, "dead", 'a b&"<'))
    q = "a%20b%26%22%3C"  # as the urlencode filter wrote it
    assert nav.count("<a ") == 13 and nav.count('aria-current="page"') == 1
    assert (f'<a href="/dead/?queue={q}" hx-get="/dead/?queue={q}" hx-target="body" '
            'hx-push-url="true" class="current" aria-current="page">Dead letters</a>') in nav
    assert f'<a href="/alerts/?queue={q}"' in nav and f'<a href="/?queue={q}"' in nav
    without = str(console_nav({"user": _User()}, "overview", "default"))
    assert without.count("<a ") == 12 and "/alerts/" not in without  # admins' page only


def test_a_short_payload_is_one_escaped_line() -> None:
    html = str(payload('{"a": "<b>"}'))
    assert html == '<code class="payload">{&quot;a&quot;: &quot;&lt;b&gt;&quot;}</code>'


def test_a_long_payload_is_cut_with_a_show_all_that_needs_no_javascript() -> None:
    body = json.dumps({"rows": [{"id": i, "name": f"<item {i}>"} for i in range(40)]})
    html = str(payload(body))
    assert html.startswith('<details class="payload"><summary><code>')
    assert "…</code>" in html and "show all" in html
    assert '<pre>{\n  &quot;rows&quot;: [\n    {\n      &quot;id&quot;: 0,' in html  # pretty
    assert "<item" not in html and "&lt;item 39&gt;" in html


def test_progress_bar_segments_are_svg_widths() -> None:
    class Row:
        total, done, dead, cancelled, leased, delayed, waiting = 10, 5, 1, 0, 2, 0, 2

    html = str(progress(Row()))
    assert '<rect class="p-done" x="0.000" y="0" width="50.000"' in html
    assert '<rect class="p-dead" x="50.000" y="0" width="10.000"' in html
    assert '<rect class="p-waiting" x="80.000" y="0" width="20.000"' in html
    assert ">60%<" in html and " style=" not in html


@pytest.mark.django_db
def test_chart_rates_are_counter_differences_per_minute_with_gaps() -> None:
    now = dt.datetime(2026, 11, 23, 12, 0, 30, tzinfo=dt.UTC)
    start = now.replace(second=0) - dt.timedelta(hours=1)
    rows = []
    for i in range(0, 60 * 6 + 1):  # every 10 s over the hour: 120 done a minute
        at = start + dt.timedelta(seconds=10 * i)
        if dt.timedelta(minutes=20) <= at - start < dt.timedelta(minutes=25):
            continue  # the mirror was down: a gap
        rows.append(QueueSample(queue="q", at=at, done=20 * i, failed=i // 6, retried=0))
    QueueSample.objects.bulk_create(rows)
    data = charts.buckets("q", charts.HOUR, now)
    assert len(data) == 60
    assert data[0].rates == {"done": 120.0, "failed": 1.0, "retried": 0.0}
    # The last sample before 11:20 is 11:19:50; none is close enough to 11:21 ... 11:24.
    assert [b.rates["done"] for b in data[19:26]] == [100.0, None, None, None, None, None, 120.0]
    chart = charts.chart("q", charts.HOUR, now)
    assert chart.ymax == 200 and len(chart.lines[0].paths) == 2  # the gap splits the line


def test_a_lone_point_is_drawn_as_a_dash_across_its_bucket() -> None:
    # A new stack's first minute: one point, which a polyline of one point does not show.
    start = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)
    data = [charts.Bucket(start + dt.timedelta(minutes=i), {"done": v})
            for i, v in enumerate([None, 5.0, None, 1.0, 2.0])]
    chart = charts.draw("t", data, dt.timedelta(minutes=1))
    lone, run = chart.lines[0].paths
    (x1, y1), (x2, y2) = (p.split(",") for p in lone.split())
    assert y1 == y2 and float(x2) - float(x1) > 10
    assert len(run.split()) == 2 and not chart.empty


@pytest.mark.django_db
def test_an_empty_window_says_what_a_point_needs() -> None:
    now = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)
    assert charts.chart("q", charts.DAY, now).empty_text.startswith(
        "No sample of this queue yet: the mirror (runservices, or runmirror) records its "
        "counters every ~10 s")
    QueueSample.objects.create(queue="q", at=now - dt.timedelta(minutes=2), done=5)
    day = charts.chart("q", charts.DAY, now)
    assert day.empty and day.empty_text.startswith(
        "Its samples begin at 11:58:00 UTC (2 min ago), too few yet for a point: each is the "
        "change of the queue's counters over a minute, between two of the samples")
    # A new install's first samples, less than a whole minute of them: when the first point
    # comes.
    QueueSample.objects.create(queue="new", at=now - dt.timedelta(seconds=20), done=5)
    assert charts.chart("new", charts.HOUR, now + dt.timedelta(seconds=5)).empty_text == (
        "The first sample of this queue came 25 s ago (11:59:40 UTC): a point is the change of "
        "its counters over a whole minute, so the first one (12:00 to 12:01) is drawn once "
        "that minute is over.")
    # ... and samples of the current minute only.
    QueueSample.objects.create(queue="newer", at=now + dt.timedelta(seconds=2), done=5)
    assert charts.chart("newer", charts.DAY, now + dt.timedelta(seconds=5)).empty_text == (
        "The first sample of this queue came 3 s ago (12:00:02 UTC): a point is the change of "
        "its counters over a whole minute, so the first one (12:01 to 12:02) is drawn once "
        "that minute is over.")
    # A mirror that stopped: the window says since when there is none.
    later = now + dt.timedelta(days=2)
    assert charts.chart("q", charts.HOUR, later).empty_text.startswith(
        "No sample in the last hour: the last is from 2026-11-23 11:58 UTC (2 d 0 h ago).")


@pytest.mark.django_db
def test_charts_of_a_new_install_draw_the_minutes_that_have_samples() -> None:
    # Three minutes of samples, every 10 s, 60 tasks done a minute: the hour's chart spans
    # those minutes (not its right 5 %) and the day's draws them per minute (not nothing).
    now = dt.datetime(2026, 11, 23, 12, 0, 5, tzinfo=dt.UTC)
    first = now - dt.timedelta(minutes=3)
    QueueSample.objects.bulk_create(
        QueueSample(queue="q", at=first + dt.timedelta(seconds=10 * i), done=10 * i)
        for i in range(19))
    for window in (charts.HOUR, charts.DAY):
        c = charts.chart("q", window, now)
        assert not c.empty, window.name
        [points] = c.lines[0].paths
        xs = [float(p.split(",")[0]) for p in points.split()]
        plot = c.width - c.plot_left
        assert xs[0] - c.plot_left < 0.4 * plot and c.width - xs[-1] < 0.4 * plot, window.name
        assert [tip for _, _, tip in c.hits] == [
            "11:58 UTC: done 60/min, failed 0/min, retried 0/min",
            "11:59 UTC: done 60/min, failed 0/min, retried 0/min"], window.name
        assert c.note == ("Its samples begin at 11:57 UTC (3 min ago): drawn from there, a "
                          "point per minute.")


@pytest.mark.django_db
def test_a_counter_that_went_down_counts_as_zero() -> None:
    now = dt.datetime(2026, 11, 23, 12, 0, tzinfo=dt.UTC)
    QueueSample.objects.bulk_create([
        QueueSample(queue="q", at=now - dt.timedelta(minutes=2), done=500),
        QueueSample(queue="q", at=now - dt.timedelta(minutes=1), done=10),  # Redis emptied
        QueueSample(queue="q", at=now, done=70),
    ])
    data: Any = charts.buckets("q", charts.HOUR, now)
    assert [b.rates["done"] for b in data[-2:]] == [0.0, 60.0]

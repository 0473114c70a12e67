"""Per-minute throughput, failures and retries from QueueSample rows, drawn as inline SVG.

Why server-rendered SVG and not a charting library: the pages already come from the server,
an SVG of three lines is a few hundred bytes of markup the template writes, it needs no
JavaScript (so it works with JavaScript off and under a Content-Security-Policy that allows
no inline script), and there is nothing to vendor, update or audit.

The samples hold the queue's cumulative counters (the engine's `stats` hash) every ~10 s; a
bucket's rate is the difference of the counters at its two ends over its length. A counter
that went down (Redis emptied) counts as zero for that bucket; a bucket without samples at
both ends (the mirror was not running) is a gap in the line.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from core.models import QueueSample

SERIES = (("done", "done"), ("failed", "failed"), ("retried", "retried"))
WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP = 600, 140, 44, 18, 8


@dataclass(frozen=True)
class Window:
    name: str
    span: dt.timedelta
    bucket: dt.timedelta


HOUR = Window("last hour", dt.timedelta(hours=1), dt.timedelta(minutes=1))
DAY = Window("last day", dt.timedelta(days=1), dt.timedelta(minutes=15))


@dataclass(frozen=True)
class Bucket:
    start: dt.datetime
    rates: dict[str, float | None]  # per minute


Sample = tuple[dt.datetime, int, int, int]  # at, then SERIES' counters
# A chart whose samples begin inside its window draws only the span they cover, a point per
# the largest of these buckets (no finer than the window's own) that still gives MIN_POINTS.
FINER = (dt.timedelta(minutes=15), dt.timedelta(minutes=5), dt.timedelta(minutes=1))
MIN_POINTS = 8


def _samples(queue: str, start: dt.datetime, end: dt.datetime) -> list[Sample]:
    """The queue's samples from `start` (and a couple of minutes before: the first edge's)
    to `end`: one indexed range read (queue, at)."""
    return list(
        QueueSample.objects.filter(
            queue=queue, at__gte=start - dt.timedelta(minutes=2), at__lte=end
        ).order_by("at").values_list("at", *(field for field, _ in SERIES))
    )


def _rates(rows: Sequence[Sample], edges: list[dt.datetime], bucket: dt.timedelta
           ) -> list[Bucket]:
    """The buckets between consecutive `edges`, each with its per-minute rates."""
    times = [r[0] for r in rows]
    # A sample older than this before an edge does not tell the counters at the edge.
    tolerance = min(bucket / 2, dt.timedelta(minutes=2))

    def at(edge: dt.datetime) -> tuple[int, ...] | None:
        i = bisect.bisect_right(times, edge) - 1
        if i < 0 or edge - times[i] > tolerance:
            return None  # no sample close enough before this edge
        return tuple(rows[i][1:])

    values = [at(e) for e in edges]
    minutes = bucket / dt.timedelta(minutes=1)
    out = []
    for i in range(len(edges) - 1):
        a, b = values[i], values[i + 1]
        rates: dict[str, float | None] = {}
        for j, (_, name) in enumerate(SERIES):
            rates[name] = None if a is None or b is None else max(0, b[j] - a[j]) / minutes
        out.append(Bucket(edges[i], rates))
    return out


def _edges(end: dt.datetime, bucket: dt.timedelta, n: int) -> list[dt.datetime]:
    return [end - bucket * (n - i) for i in range(n + 1)]


def buckets(queue: str, window: Window, now: dt.datetime) -> list[Bucket]:
    """The window's buckets, oldest first, each with its per-minute rates."""
    end = now.replace(second=0, microsecond=0)
    n = int(window.span / window.bucket)
    edges = _edges(end, window.bucket, n)
    return _rates(_samples(queue, edges[0], end), edges, window.bucket)


@dataclass(frozen=True)
class Line:
    name: str
    paths: list[str]  # SVG polyline points, one per unbroken run
    total: float  # over the window (events)


@dataclass(frozen=True)
class Chart:
    title: str
    width: int
    height: int
    lines: list[Line]
    ymax: float
    hits: list[tuple[float, float, str]]  # x, width, tooltip per bucket
    labels: list[tuple[float, str, str]]  # x, text under the axis, its text-anchor
    empty: bool
    plot_left: int
    plot_bottom: int
    plot_top: int
    unit: str = "tasks per minute"
    totals: bool = True  # the legend shows each line's total over the window
    empty_text: str = ("No samples in this window yet: the mirror (runmirror) records the "
                       "queue's counters every ~10 s.")
    note: str = ""  # what the chart draws of its window, when not all of it


def per_minute(v: float) -> str:
    return f"{_fmt(v)}/min"


def chart(queue: str, window: Window, now: dt.datetime) -> Chart:
    """The window's lines scaled into a WIDTH x HEIGHT box. When the queue's samples begin
    inside the window (a new install, a new queue, a mirror started late) only the span they
    cover is drawn, with finer points if there are few; when no point can be drawn, the chart
    says why."""
    end = now.replace(second=0, microsecond=0)
    bucket = window.bucket
    edges = _edges(end, bucket, int(window.span / bucket))
    # Up to now, not only to the last edge: a sample of the current minute says one was taken.
    rows = _samples(queue, edges[0], now)
    first = rows[0][0] if rows else None
    note = ""
    if first is None:
        return draw(window.name, _rates(rows, edges, bucket), bucket,
                    empty_text=_no_samples(queue, window, now))
    if first > edges[0] + min(bucket / 2, dt.timedelta(minutes=2)):
        # The samples begin inside the window: from the first edge after the first sample.
        covered = end - first
        bucket = next((b for b in FINER if b <= window.bucket and covered / b >= MIN_POINTS),
                      FINER[-1])
        n = int(covered / bucket)
        if n < 1:
            start = end if first <= end else end + bucket  # the first whole minute after it
            return draw(window.name, [], bucket, empty_text=(
                f"The first sample of this queue came {_ago(now - first)} ago "
                f"({first:%H:%M:%S} UTC): a point is the change of its counters over a whole "
                f"minute, so the first one ({start:%H:%M} to {start + bucket:%H:%M}) is drawn "
                "once that minute is over."))
        edges = _edges(end, bucket, n)
        note = (f"Its samples begin at {first:%H:%M} UTC ({_ago(now - first)} ago): drawn "
                f"from there, a point per {_span(bucket).removeprefix('a ')}.")
    out = draw(window.name, _rates(rows, edges, bucket), bucket, empty_text=(
        f"No point in this window yet: each is the change of the queue's counters over "
        f"{_span(bucket)}, between two of the samples that the mirror (runservices, or "
        "runmirror) records every ~10 s."))
    if out.empty and note:
        return replace(out, empty_text=(
            f"Its samples begin at {first:%H:%M:%S} UTC ({_ago(now - first)} ago), too few "
            "yet for a point: each is the change of the queue's counters over a minute, "
            "between two of the samples that the mirror records every ~10 s."))
    return replace(out, note=note)


def _no_samples(queue: str, window: Window, now: dt.datetime) -> str:
    """Why a window has no sample: none ever (a new install), or none lately (no mirror)."""
    last = (QueueSample.objects.filter(queue=queue).order_by("-at")
            .values_list("at", flat=True).first())
    if last is None:
        return ("No sample of this queue yet: the mirror (runservices, or runmirror) records "
                "its counters every ~10 s, and the chart begins a minute after the first.")
    return (f"No sample in the {window.name}: the last is from {last:%Y-%m-%d %H:%M} UTC "
            f"({_ago(now - last)} ago). The mirror (runservices, or runmirror) records the "
            "queue's counters every ~10 s while it runs: is it running?")


def _ago(d: dt.timedelta) -> str:
    s = max(0, int(d.total_seconds()))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def _span(d: dt.timedelta) -> str:
    minutes = int(d / dt.timedelta(minutes=1))
    return f"{minutes} minutes" if minutes != 1 else "a minute"


def draw(
    title: str, data: Sequence[Bucket], bucket: dt.timedelta, *,
    unit: str = "tasks per minute", value_text: Callable[[float], str] = per_minute,
    totals: bool = True, empty_text: str | None = None,
) -> Chart:
    """Lines through the buckets' values (one line per key of their `rates`, None: a gap),
    scaled into a WIDTH x HEIGHT box. With `totals`, each line's legend shows its sum over
    the window (the values being per minute)."""
    names = list(data[0].rates) if data else [name for _, name in SERIES]
    peak = max((v for b in data for v in b.rates.values() if v is not None), default=0.0)
    ymax = _nice(peak)
    plot_w = WIDTH - PAD_LEFT - 4
    plot_h = HEIGHT - PAD_BOTTOM - PAD_TOP
    step = plot_w / max(1, len(data))
    minutes = bucket / dt.timedelta(minutes=1)

    def xy(x: float, v: float) -> str:
        return f"{PAD_LEFT + step * x:.1f},{PAD_TOP + plot_h * (1 - v / ymax):.1f}"

    def path(run: list[tuple[int, float]]) -> str:
        if len(run) == 1:  # a lone point (the first minute of a new stack): a short dash
            i, v = run[0]
            return f"{xy(i + 0.2, v)} {xy(i + 0.8, v)}"
        return " ".join(xy(i + 0.5, v) for i, v in run)

    lines = []
    for name in names:
        paths: list[str] = []
        run: list[tuple[int, float]] = []
        for i, b in enumerate(data):
            v = b.rates[name]
            if v is None:
                if run:
                    paths.append(path(run))
                run = []
            else:
                run.append((i, v))
        if run:
            paths.append(path(run))
        total = sum((b.rates[name] or 0) * minutes for b in data)
        lines.append(Line(name, paths, total))
    hits, labels = _hits_and_labels(data, bucket, step, plot_w, value_text)
    return Chart(
        title=title, width=WIDTH, height=HEIGHT, lines=lines, ymax=ymax, hits=hits,
        labels=labels, empty=all(not line.paths for line in lines), plot_left=PAD_LEFT,
        plot_bottom=HEIGHT - PAD_BOTTOM, plot_top=PAD_TOP, unit=unit, totals=totals,
        empty_text=empty_text or Chart.empty_text,
    )


def _hits_and_labels(
    data: Sequence[Bucket], bucket: dt.timedelta, step: float, plot_w: float,
    value_text: Callable[[float], str],
) -> tuple[list[tuple[float, float, str]], list[tuple[float, str, str]]]:
    """Each bucket's hover area with its values in words, and the axis' three time labels."""
    # Times of day within a day; dates beyond.
    fmt = "%H:%M" if bucket < dt.timedelta(hours=1) else (
        "%m-%d %H:%M" if bucket < dt.timedelta(days=1) else "%Y-%m-%d")
    hits = []
    for i, b in enumerate(data):
        text = ", ".join(
            f"{name} {value_text(v)}" if v is not None else f"{name} no data"
            for name, v in b.rates.items()
        )
        hits.append((PAD_LEFT + step * i, step, f"{b.start:{fmt}} UTC: {text}"))
    labels: list[tuple[float, str, str]] = []
    if data:
        labels = [(float(PAD_LEFT), f"{data[0].start:{fmt}}", "start"),
                  (PAD_LEFT + step * (len(data) // 2), f"{data[len(data) // 2].start:{fmt}}",
                   "middle"),
                  (PAD_LEFT + plot_w, f"{(data[-1].start + bucket):{fmt}} UTC", "end")]
    return hits, labels


def _nice(peak: float) -> float:
    """A round axis maximum at or above `peak` (1, 2, 5 x 10^n)."""
    if peak <= 0:
        return 1.0
    scale = 1.0
    while scale * 10 <= peak:
        scale *= 10
    while scale > peak:
        scale /= 10
    for m in (1, 2, 5, 10):
        if m * scale >= peak:
            return m * scale
    return 10 * scale


def _fmt(v: float) -> str:
    return f"{v:.0f}" if v >= 10 or v == int(v) else f"{v:.1f}"

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
from dataclasses import dataclass

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


def buckets(queue: str, window: Window, now: dt.datetime) -> list[Bucket]:
    """The window's buckets, oldest first, each with its per-minute rates."""
    end = now.replace(second=0, microsecond=0)
    n = int(window.span / window.bucket)
    edges = [end - window.bucket * (n - i) for i in range(n + 1)]
    # One indexed range read (queue, at); a sample just before the window gives the first edge.
    rows = list(
        QueueSample.objects.filter(
            queue=queue, at__gte=edges[0] - dt.timedelta(minutes=2), at__lte=end
        ).order_by("at").values_list("at", *(field for field, _ in SERIES))
    )
    times = [r[0] for r in rows]
    # A sample older than this before an edge does not tell the counters at the edge.
    tolerance = min(window.bucket / 2, dt.timedelta(minutes=2))

    def at(edge: dt.datetime) -> tuple[int, ...] | None:
        i = bisect.bisect_right(times, edge) - 1
        if i < 0 or edge - times[i] > tolerance:
            return None  # no sample close enough before this edge
        return tuple(rows[i][1:])

    values = [at(e) for e in edges]
    minutes = window.bucket / dt.timedelta(minutes=1)
    out = []
    for i in range(n):
        a, b = values[i], values[i + 1]
        rates: dict[str, float | None] = {}
        for j, (_, name) in enumerate(SERIES):
            rates[name] = None if a is None or b is None else max(0, b[j] - a[j]) / minutes
        out.append(Bucket(edges[i], rates))
    return out


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


def per_minute(v: float) -> str:
    return f"{_fmt(v)}/min"


def chart(queue: str, window: Window, now: dt.datetime) -> Chart:
    """The window's lines scaled into a WIDTH x HEIGHT box."""
    return draw(window.name, buckets(queue, window, now), window.bucket, empty_text=(
        f"No point in this window yet: each is the change of the queue's counters over "
        f"{_span(window.bucket)}, between two of the samples that the mirror (runservices, or "
        "runmirror) records every ~10 s."))


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
    labels = []
    if data:
        labels = [(float(PAD_LEFT), f"{data[0].start:{fmt}}", "start"),
                  (PAD_LEFT + step * (len(data) // 2), f"{data[len(data) // 2].start:{fmt}}",
                   "middle"),
                  (PAD_LEFT + plot_w, f"{(data[-1].start + bucket):{fmt}} UTC", "end")]
    return Chart(
        title=title, width=WIDTH, height=HEIGHT, lines=lines, ymax=ymax, hits=hits,
        labels=labels, empty=all(not line.paths for line in lines), plot_left=PAD_LEFT,
        plot_bottom=HEIGHT - PAD_BOTTOM, plot_top=PAD_TOP, unit=unit, totals=totals,
        empty_text=empty_text or Chart.empty_text,
    )


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

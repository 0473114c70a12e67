"""The Handlers page's figures: per-handler sums over a time range and the lines of one
handler's charts, from the metrics the mirror rolls into the database (core/mirror/metrics.py):
minute rows up to a day back, hour rows beyond, and the totals since metrics began (never
pruned). Retention (core.mirror.retention) may keep fewer minutes or hours than a range spans:
the minutes pruned are read from their hours, and the page says how far back the hours go."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from core.models import HandlerHour, HandlerMinute, HandlerTotal
from core.queue.metrics import NBUCKETS, HandlerCounts

from . import charts


@dataclass(frozen=True)
class Range:
    name: str  # the query parameter's value
    title: str
    span: dt.timedelta
    bucket: dt.timedelta  # one point of the charts
    hourly: bool  # read hour rows (else minute rows)
    total: bool = False  # the totals since metrics began (no charts)


RANGES = {r.name: r for r in (
    Range("1h", "last hour", dt.timedelta(hours=1), dt.timedelta(minutes=1), False),
    Range("24h", "last day", dt.timedelta(days=1), dt.timedelta(minutes=15), False),
    Range("7d", "last 7 days", dt.timedelta(days=7), dt.timedelta(hours=2), True),
    Range("90d", "last 90 days", dt.timedelta(days=90), dt.timedelta(days=1), True),
    Range("all", "time since metrics began", dt.timedelta(days=90), dt.timedelta(days=1),
          True, total=True),
)}
DEFAULT_RANGE = "1h"
SORTS = ("time", "failure", "p95", "done", "name")
QUANTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


@dataclass(frozen=True)
class Row:
    handler: str
    counts: HandlerCounts

    @property
    def total_s(self) -> float:
        return self.counts.time_us / 1e6

    @property
    def failure_pct(self) -> float:
        return 100 * self.counts.failure_rate

    @property
    def p50(self) -> float | None:
        return self.counts.quantile(0.5)

    @property
    def p95(self) -> float | None:
        return self.counts.quantile(0.95)

    @property
    def p99(self) -> float | None:
        return self.counts.quantile(0.99)


def _start(r: Range, now: dt.datetime) -> dt.datetime:
    """The first bucket's start: the range back from the end of the current bucket."""
    if r.bucket >= dt.timedelta(days=1):
        end = now.replace(hour=0, minute=0, second=0, microsecond=0) + dt.timedelta(days=1)
    elif r.hourly:
        end = now.replace(minute=0, second=0, microsecond=0) + dt.timedelta(hours=1)
    else:
        end = now.replace(second=0, microsecond=0) + dt.timedelta(minutes=1)
    return end - r.span


COUNTS = ("handler", "done", "failed", "retried", "run_us", "buckets", "fail_us")


def _rows(queue: str, r: Range, since: dt.datetime, handler: str | None = None,
          minutes_from: dt.datetime | None = None
          ) -> Iterable[tuple[dt.datetime, str, HandlerCounts]]:
    """The range's rows from `since`: hour rows, or minute rows (those before `minutes_from`,
    the first whole hour of minutes retention keeps, read from their hours: the first of
    them whole)."""
    qs = HandlerHour.objects.filter(queue=queue, hour__gte=since)
    if not r.hourly:
        qs = HandlerHour.objects.filter(
            queue=queue, hour__gte=since.replace(minute=0, second=0, microsecond=0),
            hour__lt=minutes_from) if minutes_from and minutes_from > since else qs.none()
    if handler is not None:
        qs = qs.filter(handler=handler)
    yield from _counted(qs.values_list("hour", *COUNTS))
    if not r.hourly:
        qm = HandlerMinute.objects.filter(queue=queue, minute__gte=max(since, minutes_from)
                                          if minutes_from else since)
        if handler is not None:
            qm = qm.filter(handler=handler)
        yield from _counted(qm.values_list("minute", *COUNTS))


def _counted(values: Any) -> Iterable[tuple[dt.datetime, str, HandlerCounts]]:
    for at, name, done, failed, retried, run_us, buckets, fail_us in values.iterator(
            chunk_size=2000):
        b = [int(n) for n in buckets[:NBUCKETS]]
        yield at, name, HandlerCounts(done, failed, retried, run_us,
                                      b + [0] * (NBUCKETS - len(b)), fail_us)


@dataclass(frozen=True)
class Kept:
    """How far back the queue's minute and hour rows go, as retention keeps them."""

    minutes_s: int | None  # None: forever
    hours_s: int | None

    def minutes_from(self, now: dt.datetime) -> dt.datetime | None:
        """The first whole hour whose minutes are all kept (None: every minute is)."""
        if self.minutes_s is None:
            return None
        oldest = now - dt.timedelta(seconds=self.minutes_s)
        hour = oldest.replace(minute=0, second=0, microsecond=0)
        return hour if hour == oldest else hour + dt.timedelta(hours=1)

    @property
    def minutes_text(self) -> str:
        from core.mirror.retention import format_duration

        return format_duration(self.minutes_s)

    @property
    def hours_text(self) -> str:
        from core.mirror.retention import format_duration

        return format_duration(self.hours_s)

    def short_of(self, r: Range) -> bool:
        """The range reaches past the hours kept."""
        return (not r.total and self.hours_s is not None
                and self.hours_s < r.span.total_seconds())


def kept(queue: str) -> Kept:
    """The queue's retention of handler minutes and hours (the defaults when a setting is not
    a duration: the page still shows what there is)."""
    from core.mirror import retention

    try:
        policy = retention.load()
    except retention.BadRetention:
        return Kept(retention.KINDS["handler-minutes"].default_s,
                    retention.KINDS["handler-hours"].default_s)
    return Kept(policy.keep_s("handler-minutes", queue), policy.keep_s("handler-hours", queue))


def totals(queue: str) -> Iterable[tuple[dt.datetime, str, HandlerCounts]]:
    """Every handler's counts since metrics began (HandlerTotal: never pruned)."""
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    for name, done, failed, retried, run_us, buckets, fail_us in (
            HandlerTotal.objects.filter(queue=queue).values_list(*COUNTS).iterator()):
        b = [int(n) for n in buckets[:NBUCKETS]]
        yield epoch, name, HandlerCounts(done, failed, retried, run_us,
                                         b + [0] * (NBUCKETS - len(b)), fail_us)


def table(queue: str, r: Range, now: dt.datetime, sort: str = "time") -> list[Row]:
    """One row per handler with anything counted in the range (or since metrics began),
    sorted by `sort` (SORTS): total run time, failure rate, p95 or tasks done (largest first),
    or name."""
    sums: dict[str, HandlerCounts] = {}
    found = totals(queue) if r.total else _rows(
        queue, r, _start(r, now), minutes_from=kept(queue).minutes_from(now))
    for _, name, counts in found:
        sums.setdefault(name, HandlerCounts()).add(counts)
    rows = [Row(name, c) for name, c in sums.items()]
    rows.sort(key=lambda row: row.handler)
    if sort == "time":
        rows.sort(key=lambda row: row.counts.time_us, reverse=True)
    elif sort == "failure":
        rows.sort(key=lambda row: row.counts.failure_rate, reverse=True)
    elif sort == "p95":
        rows.sort(key=lambda row: row.p95 or 0.0, reverse=True)
    elif sort == "done":
        rows.sort(key=lambda row: row.counts.done, reverse=True)
    return rows


def _seconds(v: float) -> str:
    return f"{v * 1000:.3g} ms" if v < 1 else f"{v:.3g} s"


def handler_charts(queue: str, handler: str, r: Range, now: dt.datetime) -> list[charts.Chart]:
    """Two charts of one handler over the range: tasks per minute by outcome, and the run
    time's p50, p95 and p99 per point (a gap where nothing was timed). Since metrics began:
    the last 90 days' charts (the totals have no time)."""
    if r.total:
        r = RANGES["90d"]
    start = _start(r, now)
    n = int(r.span / r.bucket)
    sums = [HandlerCounts() for _ in range(n)]
    for at, _, counts in _rows(queue, r, start, handler, kept(queue).minutes_from(now)):
        i = int((at - start) / r.bucket)
        if 0 <= i < n:
            sums[i].add(counts)
    minutes = r.bucket / dt.timedelta(minutes=1)
    rates = [
        charts.Bucket(start + r.bucket * i, {"done": c.done / minutes,
                                             "failed": c.failed / minutes,
                                             "retried": c.retried / minutes})
        for i, c in enumerate(sums)
    ]
    times = [
        charts.Bucket(start + r.bucket * i, {name: c.quantile(q) for name, q in QUANTILES})
        for i, c in enumerate(sums)
    ]
    peak = max((v for b in times for v in b.rates.values() if v is not None), default=0.0)
    scale, unit = (1.0, "run time, s") if peak >= 10 else (1000.0, "run time, ms")
    times = [charts.Bucket(b.start, {k: None if v is None else v * scale
                                     for k, v in b.rates.items()}) for b in times]
    return [
        charts.draw(f"{handler}, {r.title}", rates, r.bucket,
                    empty_text=f"Nothing of {handler} was counted in the {r.title}."),
        charts.draw(f"{handler}, {r.title}", times, r.bucket, unit=unit, totals=False,
                    value_text=lambda v: _seconds(v / scale),
                    empty_text=f"No timed run of {handler} in the {r.title}."),
    ]

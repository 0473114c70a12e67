"""Per-handler metrics into the database: the minutes the engine counts in Redis
(core/queue/metrics.py) become minute rows and hour rows (by default kept a day and 90 days:
retention's handler-minutes and handler-hours, core.mirror.retention) and per-handler totals
(never pruned: /metrics serves them to Prometheus as counters, the Handlers page its "since
metrics began").

Idempotent: a minute row holds the minute's absolute counts as last read, and only the
difference between what Redis says now and that row goes into the hour and the totals, in
one transaction with the row. Reading a minute again (the current one at every roll, or all
of them after a crash before the commit) adds nothing twice. A cursor per queue says from
which minute on a roll reads: the first one not known to be over when it last read.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.db import transaction

from core.models import HandlerHour, HandlerMinute, HandlerTotal, MetricsCursor
from core.queue import read
from core.queue.client import Queue
from core.queue.metrics import NBUCKETS, HandlerCounts

ROLL_EVERY_S = 5.0


def at_minute(minute: int) -> datetime:
    return datetime.fromtimestamp(minute * 60, UTC)


def counts_of(row: HandlerMinute | HandlerHour | HandlerTotal) -> HandlerCounts:
    buckets = [int(n) for n in row.buckets[:NBUCKETS]]
    buckets += [0] * (NBUCKETS - len(buckets))
    return HandlerCounts(row.done, row.failed, row.retried, row.run_us, buckets, row.fail_us)


def _set(row: HandlerMinute | HandlerHour | HandlerTotal, c: HandlerCounts) -> None:
    row.done, row.failed, row.retried, row.run_us = c.done, c.failed, c.retried, c.run_us
    row.buckets = list(c.buckets)
    row.fail_us = c.fail_us


def _add(model: type[HandlerHour] | type[HandlerTotal], lookup: dict[str, object],
         delta: HandlerCounts) -> None:
    row, _ = model.objects.select_for_update().get_or_create(**lookup)
    total = counts_of(row)
    total.add(delta)
    _set(row, total)
    row.save()


def roll(q: Queue) -> int:
    """Store the queue's minutes from its cursor to the current one; returns how many minute
    rows changed. One Redis round trip, then one transaction."""
    now = read.current_minute(q)
    oldest = now - read.MAX_METRIC_MINUTES + 1  # older minutes have expired in Redis
    cursor = MetricsCursor.objects.filter(queue=q.name).values_list("minute", flat=True).first()
    first = min(now, oldest if cursor is None else max(int(cursor), oldest))
    data = read.handler_metrics(q, first, now)
    changed = 0
    with transaction.atomic():
        stored = {
            (row.minute, row.handler): row
            for row in HandlerMinute.objects.select_for_update().filter(
                queue=q.name, minute__gte=at_minute(first), minute__lte=at_minute(now))
        }
        hours: dict[tuple[datetime, str], HandlerCounts] = {}
        totals: dict[str, HandlerCounts] = {}
        for minute, handlers in sorted(data.items()):
            at = at_minute(minute)
            for handler, counts in handlers.items():
                row = stored.get((at, handler))
                old = counts_of(row) if row else HandlerCounts()
                delta = counts.minus(old)
                if delta.is_zero():
                    continue
                if _went_down(delta):
                    # Redis lost the minute's key (a restart without persistence) and counts
                    # afresh: what it says now is all new.
                    delta = counts
                    counts = HandlerCounts()
                    counts.add(old)
                    counts.add(delta)
                if row is None:
                    row = HandlerMinute(queue=q.name, handler=handler, minute=at)
                _set(row, counts)
                row.save()
                changed += 1
                hour = at.replace(minute=0)
                hours.setdefault((hour, handler), HandlerCounts()).add(delta)
                totals.setdefault(handler, HandlerCounts()).add(delta)
        for (hour, handler), delta in sorted(hours.items()):
            _add(HandlerHour, {"queue": q.name, "hour": hour, "handler": handler}, delta)
        for handler, delta in sorted(totals.items()):
            _add(HandlerTotal, {"queue": q.name, "handler": handler}, delta)
        # Every minute before `now` is over (the engine counts in the minute of its own
        # clock, the one read here): the next roll starts at `now`.
        MetricsCursor.objects.update_or_create(queue=q.name, defaults={"minute": now})
    return changed


def _went_down(delta: HandlerCounts) -> bool:
    return min(delta.done, delta.failed, delta.retried, delta.run_us, delta.fail_us,
               *delta.buckets) < 0


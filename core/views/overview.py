"""Overview: every queue's depths, workers and anomalies; the picked queue's charts; Redis."""

from __future__ import annotations

import datetime as dt

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from core.conf import get_queue
from core.console import charts
from core.console.aggregates import cached, mirror_lag, redis_health, summary
from core.console.queues import queue_from, queue_names
from core.models import QueueSample

from .common import console_page, page

# Dead letters grew over this window: an anomaly.
DEAD_WINDOW = dt.timedelta(minutes=10)


@console_page
def overview(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    now = timezone.now()
    summaries = [summary(get_queue(name)) for name in queue_names()]
    current = next(s for s in summaries if s.name == queue.name)
    # Samples come every ~10 s and the charts move by the minute: 10 s of cache is plenty.
    dead_before = cached(f"dead-before|{queue.name}", lambda: _dead_before(queue.name, now),
                         factor=10)
    chart_list = cached(
        f"charts|{queue.name}",
        lambda: [charts.chart(queue.name, w, now) for w in (charts.HOUR, charts.DAY)],
        factor=10,
    )
    anomalies = []
    for s in summaries:  # every queue's, the picked one first
        where = f"Queue {s.name}: " if len(summaries) > 1 else ""
        if s.unattended:
            waiting = s.stats.waiting + s.stats.delayed
            anomalies.append((s.name, f"{where}{_count(waiting, 'task waits', 'tasks wait')} "
                              "and no worker is live."))
        elif s.stats.unrunnable:
            for handler, n in s.stats.unrunnable.items():
                anomalies.append((s.name, f"{where}{_count(n, 'task waits', 'tasks wait')} for "
                                  f"handler {handler!r}, which no live worker runs: start a "
                                  "worker that registers it (runworker --import MODULE)."))
        if s.expired_leases:
            expired = _count(s.expired_leases, "lease is past its expiry",
                             "leases are past their expiry")
            anomalies.append((s.name, f"{where}{expired} and not recovered yet: a worker died "
                              "or stalls, or no worker runs the reaper."))
        if s.stale_workers:
            stale = _count(s.stale_workers, "registered worker has", "registered workers have")
            anomalies.append((s.name, f"{where}{stale} not beaten lately."))
    if dead_before is not None and current.stats.dead > dead_before:
        anomalies.append((queue.name, f"Dead letters of {queue.name} grew by "
                          f"{current.stats.dead - dead_before:,} in the last 10 minutes."))
    anomalies.sort(key=lambda a: a[0] != queue.name)
    context = {
        "summaries": summaries,
        "current": current,
        "anomalies": anomalies,
        "charts": chart_list,
        "health": redis_health(),
        "mirror_lag": mirror_lag(queue),
        # The strip over the page says what the table says: the same read of the queue.
        "summary": current,
    }
    return page(request, "core/overview.html", queue, context, nav="overview")


def _dead_before(queue: str, now: dt.datetime) -> int | None:
    """Dead letters in the queue's sample from about DEAD_WINDOW ago (None: no sample)."""
    row = (
        QueueSample.objects.filter(queue=queue, at__lte=now - DEAD_WINDOW,
                                   at__gte=now - 2 * DEAD_WINDOW)
        .order_by("-at").values_list("dead", flat=True).first()
    )
    return None if row is None else int(row)


def _count(n: int, one: str, many: str) -> str:
    """"1 task waits", "2 tasks wait": the count and the words that agree with it."""
    return f"{n:,} {one if n == 1 else many}"

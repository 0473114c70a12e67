"""Handlers: per-handler tasks done, failed and retried, failure rate, time spent and run-time
percentiles over a range (1h, 24h, 7d, 90d, or since metrics began), sortable; one handler's
charts over that range. From the database (the mirror rolls the engine's per-minute metrics
into it; retention prunes the minutes and hours, never the totals since metrics began)."""

from __future__ import annotations

from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from core.console import handlers as figures
from core.console import params
from core.console.aggregates import cached
from core.console.queues import queue_from

from .common import console_page, page


@console_page
def handler_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    q = request.GET
    r = figures.RANGES[params.choice(q, "range", list(figures.RANGES)) or figures.DEFAULT_RANGE]
    sort = params.choice(q, "sort", figures.SORTS) or "time"
    chosen = params.text(q, "handler", 128)
    now = timezone.now()
    rows = cached(f"handlers|{queue.name}|{r.name}|{sort}",
                  lambda: figures.table(queue.name, r, now, sort), factor=5)
    handler = chosen or (rows[0].handler if rows else None)
    chart_list = []
    if handler is not None:
        chart_list = cached(f"handler-charts|{queue.name}|{r.name}|{handler}",
                            lambda: figures.handler_charts(queue.name, handler, r, now),
                            factor=5)

    def link(**changes: str | None) -> str:
        p = {"queue": queue.name, "range": r.name, "sort": sort, "handler": chosen} | changes
        return "?" + urlencode({k: v for k, v in p.items() if v})

    kept = figures.kept(queue.name)
    context = {
        "kept": kept, "short": kept.short_of(r),
        "minutes_from_hours": not r.hourly and (kept.minutes_from(now) or now) > now - r.span,
        "rows": [(row, link(handler=row.handler)) for row in rows], "range": r,
        "ranges": [(x, link(range=x.name)) for x in figures.RANGES.values()], "sort": sort,
        "sort_links": {name: link(sort=name) for name in figures.SORTS},
        "handler": handler, "charts": chart_list,
        "known": chosen is None or any(row.handler == chosen for row in rows),
    }
    # The last hour moves by the minute: polled; longer ranges hold still.
    return page(request, "core/handlers.html", queue, context, nav="handlers",
                live=r.name == figures.DEFAULT_RANGE)

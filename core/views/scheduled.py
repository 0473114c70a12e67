"""Scheduled: the delayed requests of a queue (submit with run_at / delay, `--in`, `--at`),
soonest due first, paged by (due time, id) from Redis' own index; each can be run now or
cancelled (POSTs to the actions, permission-checked and audited there)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from core.console.paging import Paged, zset_cursor
from core.console.queues import queue_from
from core.queue import read

from .common import console_page, page

PAGE = 50


@console_page
def scheduled_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    after = zset_cursor(request)
    got = read.scheduled(queue, after=after, limit=PAGE)
    context = {
        "rows": got.items,
        "paged": Paged(got.items, str(got.cursor) if got.cursor else None, after is None),
        "list_url": reverse("core:scheduled"),
    }
    # Polled: requests leave the list as they fall due.
    return page(request, "core/scheduled.html", queue, context, nav="scheduled")

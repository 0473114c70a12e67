"""Pending entries across a queue: every leased task, the longest-overdue lease first, with
its consumer, idle time and deliveries; past-expiry leases and dead consumers stand out.

Read through the engine (read.leased_view): the queue's counters and its leases, one
page by (expiry, token) cursor, at one moment; then one round trip for those entries' XPENDING
rows and one for their consumers' heartbeats: a page costs the same with ten leases or a
million.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse

from core.console.aggregates import LIVE_WORKER_MS, QueueSummary
from core.console.paging import Paged, lease_cursor
from core.console.queues import queue_from
from core.queue import read

from .common import console_page, page
from .workers import DEFAULT_DEAD_AFTER_MS, dead_after_of

PAGE = 50


@dataclass(frozen=True)
class Entry:
    request_id: str
    task_id: str
    delivery: int
    consumer: str
    idle_ms: int | None  # None: the stream's entry is gone (acked meanwhile)
    deliveries: int
    expires_ms: int
    consumer_state: str  # alive, stale, gone, unknown
    token: str
    overdue: bool  # past its expiry: the reaper will give the task to another worker


@console_page
def pending_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    after = lease_cursor(request)
    # The page, its total and the queue's strip over it: one read (read.LeasedView).
    view = read.leased_view(queue, after=after, limit=PAGE,
                            worker_timeout_ms=LIVE_WORKER_MS)
    now, entries, nxt = _entries(view.page)
    context = {"entries": entries, "paged": Paged(entries, nxt, after is None), "lease_now": now,
               "summary": QueueSummary(queue.name, view.stats, now, view.registered_workers,
                                       view.expired_leases, None),
               "overdue": sum(1 for e in entries if e.overdue),
               # the datalist of the claim's target: consumers on this page that beat lately
               "alive_consumers": sorted({e.consumer for e in entries
                                          if e.consumer_state == "alive"})}
    return page(request, "core/pending.html", queue, context, nav="pending")


def _entries(got: read.LeasedPage) -> tuple[int, list[Entry], str | None]:
    states = {c: _consumer_state(got.now_ms, beat, info)
              for c, (beat, info) in got.heartbeats.items()}
    entries = [Entry(
        request_id=e.request_id, task_id=e.task_id, delivery=e.delivery, consumer=e.consumer,
        idle_ms=e.idle_ms, deliveries=e.deliveries, expires_ms=e.expires_ms,
        consumer_state=states.get(e.consumer, "unknown"), token=e.token,
        overdue=e.expires_ms < got.now_ms,
    ) for e in got.entries]
    return got.now_ms, entries, str(got.cursor) if got.cursor else None


def _consumer_state(now: int, beat: Any, info: Any) -> str:
    if beat is None:
        return "gone"  # not in the registry: exited, or pruned
    try:
        dead_after = dead_after_of(json.loads(info) if info else None)
    except ValueError:  # not JSON: whatever wrote it, the default applies
        dead_after = DEFAULT_DEAD_AFTER_MS
    age = now - int(float(beat))
    return "alive" if age < dead_after / 2 else "stale" if age < dead_after else "gone"

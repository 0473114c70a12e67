"""Pending entries across a queue: every leased task, the longest-overdue lease first, with
its consumer, idle time and deliveries; past-expiry leases and dead consumers stand out.

Read from the queue's `leases` index (lease token -> expiry), one page by (expiry, token)
cursor, then one round trip for those entries' XPENDING rows and one for their consumers'
heartbeats: a page costs the same with ten leases or a million.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse

from core.console.paging import Paged, lease_cursor
from core.console.queues import queue_from
from core.queue import Queue
from core.queue.client import translated
from core.queue.models import PageCursor

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
    now, entries, nxt = _entries(queue, after)
    context = {"entries": entries, "paged": Paged(entries, nxt, after is None), "lease_now": now,
               "overdue": sum(1 for e in entries if e.overdue),
               # the datalist of the claim's target: consumers on this page that beat lately
               "alive_consumers": sorted({e.consumer for e in entries
                                          if e.consumer_state == "alive"})}
    return page(request, "core/pending.html", queue, context, nav="pending")


def _entries(queue: Queue, after: PageCursor | None) -> tuple[int, list[Entry], str | None]:
    k = queue.keys
    r: Any = queue.redis
    with translated("pending entries"):
        now = queue.now_ms()
        rows = _page_ascending(r, k.leases, after, PAGE + 1)
        page_rows, more = rows[:PAGE], len(rows) > PAGE
        pipe = r.pipeline(transaction=False)
        parsed: list[tuple[str, int, str, str, int]] = []
        for token, score in page_rows:
            rid, _, rest = token.partition("/")
            tid, _, n = rest.partition("/")
            parsed.append((token, int(score), rid, tid, int(n) if n.isdecimal() else 0))
            pipe.xpending_range(k.tasks(rid), "g", tid, tid, 1)
        pel = pipe.execute(raise_on_error=False)
        consumers = sorted({p[0]["consumer"] for p in pel if isinstance(p, list) and p})
        pipe = r.pipeline(transaction=False)
        for c in consumers:
            pipe.zscore(k.workers, c)
            pipe.hget(k.worker(c), "info")
        got = pipe.execute()
    states = {}
    for i, c in enumerate(consumers):
        beat, info = got[2 * i], got[2 * i + 1]
        states[c] = _consumer_state(now, beat, info)
    entries = []
    for (token, score, rid, tid, delivery), p in zip(parsed, pel, strict=True):
        row = p[0] if isinstance(p, list) and p else None
        consumer = row["consumer"] if row else ""
        entries.append(Entry(
            request_id=rid, task_id=tid, delivery=delivery, consumer=consumer,
            idle_ms=int(row["time_since_delivered"]) if row else None,
            deliveries=int(row["times_delivered"]) if row else delivery,
            expires_ms=score, consumer_state=states.get(consumer, "unknown"), token=token,
            overdue=score < now,
        ))
    nxt = str(PageCursor(int(page_rows[-1][1]), page_rows[-1][0])) if more and page_rows else None
    return now, entries, nxt


def _consumer_state(now: int, beat: Any, info: Any) -> str:
    if beat is None:
        return "gone"  # not in the registry: exited, or pruned
    try:
        dead_after = dead_after_of(json.loads(info) if info else None)
    except ValueError:  # not JSON: whatever wrote it, the default applies
        dead_after = DEFAULT_DEAD_AFTER_MS
    age = now - int(float(beat))
    return "alive" if age < dead_after / 2 else "stale" if age < dead_after else "gone"


def _page_ascending(
    r: Any, key: str, after: PageCursor | None, n: int
) -> list[tuple[str, float]]:
    """Up to `n` rows of a sorted set in ascending (score, member) order after the cursor.
    When the cursor's row has gone (acked, renewed), rows sharing its score are skipped up to
    its member (a batch leased in one call shares its expiry), read in batches so that a
    crowded score costs only its own rows."""
    if after is None:
        return list(r.zrange(key, 0, n - 1, withscores=True))
    # Usually the cursor's lease is still there with its expiry: read on from its rank (the
    # read starts at the cursor's own row, trusted only if that row is still the cursor's).
    rank = r.zrank(key, after.member)
    if rank is not None:
        rows = r.zrange(key, rank, rank + n, withscores=True)
        if rows and rows[0][0] == after.member and int(rows[0][1]) == after.score:
            return list(rows[1:])
    out: list[tuple[str, float]] = []
    offset, batch = 0, n + 16
    while len(out) < n:
        rows = r.zrange(key, after.score, "+inf", byscore=True, offset=offset, num=batch,
                        withscores=True)
        out += [(m, s) for m, s in rows if s > after.score or m > after.member]
        if len(rows) < batch:
            break
        offset += batch
    return out[:n]

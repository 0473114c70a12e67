"""The leased tasks across a queue (the console's pending page), soonest expiry first, with
their pending-entry rows and their consumers' heartbeats."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import QueueBase, int_in, translated
from ..keys import GROUP
from ..models import PageCursor
from .common import MAX_PAGE, redis_of
from .paging import rows_ascending


@dataclass(frozen=True)
class LeasedEntry:
    token: str  # <request>/<task>/<delivery>: what a claim or release of it names
    request_id: str
    task_id: str
    delivery: int
    expires_ms: int
    consumer: str  # "" when the stream's entry is gone (acked meanwhile)
    idle_ms: int | None  # since its last delivery; None with consumer ""
    deliveries: int


@dataclass(frozen=True)
class LeasedPage:
    now_ms: int
    entries: list[LeasedEntry]
    cursor: PageCursor | None  # the next page's, None on the last one
    # each consumer's last heartbeat (ms; None: not registered) and its info text
    heartbeats: dict[str, tuple[float | None, str | None]]


def leased(q: QueueBase, *, after: PageCursor | None = None, limit: int = 50) -> LeasedPage:
    """Every leased task of the queue, soonest expiry (longest overdue) first, a page after
    `after`, with its pending-entry row and its consumer's heartbeat: three round trips
    whatever the number of leases."""
    n = int_in(limit, "limit", 1, MAX_PAGE)
    with translated("leased tasks"):
        now = q.now_ms()
        return leased_page(q, now, rows_ascending(redis_of(q), q.keys.leases, after, n + 1), n)


def leased_page(q: QueueBase, now: int, rows: list[tuple[str, float]], n: int) -> LeasedPage:
    """A page of `rows` of `leases` (n of them, one more if there is a next page) with their
    pending-entry rows and their consumers' heartbeats: two round trips."""
    k, r = q.keys, redis_of(q)
    page_rows, more = rows[:n], len(rows) > n
    pipe = r.pipeline(transaction=False)
    parsed: list[tuple[str, int, str, str, int]] = []
    for token, score in page_rows:
        rid, _, rest = token.partition("/")
        tid, _, d = rest.partition("/")
        parsed.append((token, int(score), rid, tid, int(d) if d.isdecimal() else 0))
        pipe.xpending_range(k.tasks(rid), GROUP, tid, tid, 1)
    pel = pipe.execute(raise_on_error=False)
    consumers = sorted({p[0]["consumer"] for p in pel if isinstance(p, list) and p})
    pipe = r.pipeline(transaction=False)
    for c in consumers:
        pipe.zscore(k.workers, c)
        pipe.hget(k.worker(c), "info")
    got = pipe.execute()
    beats = {c: (got[2 * i], got[2 * i + 1]) for i, c in enumerate(consumers)}
    entries = []
    for (token, score, rid, tid, delivery), p in zip(parsed, pel, strict=True):
        row = p[0] if isinstance(p, list) and p else None
        entries.append(LeasedEntry(
            token=token, request_id=rid, task_id=tid, delivery=delivery, expires_ms=score,
            consumer=row["consumer"] if row else "",
            idle_ms=int(row["time_since_delivered"]) if row else None,
            deliveries=int(row["times_delivered"]) if row else delivery))
    cursor = (PageCursor(int(page_rows[-1][1]), page_rows[-1][0])
              if more and page_rows else None)
    return LeasedPage(now, entries, cursor, beats)

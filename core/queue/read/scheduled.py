"""Delayed requests (state "scheduled"): a page of them by due time, how many are due soon."""

from __future__ import annotations

from ..base import QueueBase, int_in, translated
from ..models import Page, PageCursor, RequestInfo
from .common import MAX_PAGE, redis_of


def scheduled(
    q: QueueBase, *, after: PageCursor | None = None, limit: int = 50
) -> Page[RequestInfo]:
    """A page of delayed requests, soonest due first (then by id); pass the returned cursor
    as `after` for the next page. Each row's `due_ms` is its due time."""
    int_in(limit, "limit", 1, MAX_PAGE)
    key = q.keys.scheduled
    with translated("scheduled"):
        r = redis_of(q)
        rows: list[tuple[str, float]] = []
        if after is None:
            rows = r.zrange(key, 0, limit, withscores=True)
        else:
            # From the cursor's rank when its row is still there; else from its score on.
            rank = r.zrank(key, after.member)
            if rank is not None:
                got = r.zrange(key, rank, rank + limit + 1, withscores=True)
                if got and got[0][0] == after.member and int(got[0][1]) == after.score:
                    rows = got[1:]
                else:
                    rank = None
            if rank is None:
                got = r.zrange(key, after.score, "+inf", byscore=True, offset=0,
                               num=limit + 1 + 1000, withscores=True)
                rows = [(m, s) for m, s in got if s > after.score or m > after.member]
        page = [(m, int(s)) for m, s in rows[:limit]]
        cursor = PageCursor(page[-1][1], page[-1][0]) if len(rows) > limit else None
        pipe = r.pipeline(transaction=False)
        for rid, _ in page:
            pipe.hgetall(q.keys.request(rid))
        hashes = pipe.execute()
    out = [RequestInfo.from_hash(rid, h) for (rid, _), h in zip(page, hashes, strict=True) if h]
    return Page(out, cursor)


def due_within(q: QueueBase, ms: int) -> int:
    """How many delayed requests are due within `ms` from now (overdue ones included)."""
    now = q.now_ms()
    with translated("due_within"):
        return int(redis_of(q).zcount(q.keys.scheduled, "-inf", now + ms))

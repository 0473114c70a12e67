"""Pages of the engine's sorted-set indexes (requests by state, workers, leases), after a
cursor that names the last row read: no offsets, so a walk sees a row that stays exactly once."""

from __future__ import annotations

from typing import Any

from ..base import QueueBase, int_in
from ..models import PageCursor
from .common import MAX_PAGE, redis_of


def page(
    q: QueueBase, key: str, after: PageCursor | None, limit: int
) -> tuple[list[tuple[str, int]], PageCursor | None]:
    """One page of a zset as (member, score), highest score first and, within a score,
    highest member first (Redis' reverse order); and the cursor for the next page. Runs
    inside translated()."""
    int_in(limit, "limit", 1, MAX_PAGE)
    if after is None:
        rows = redis_of(q).zrange(key, 0, limit, desc=True, withscores=True)
    else:
        rows = rows_after(q, key, after, limit + 1)
    found = [(member, int(score)) for member, score in rows[:limit]]
    cursor = PageCursor(found[-1][1], found[-1][0]) if len(rows) > limit else None
    return found, cursor


def rows_after(q: QueueBase, key: str, after: PageCursor, n: int) -> list[tuple[str, float]]:
    """Up to `n` rows that sort after the cursor's row."""
    r = redis_of(q)
    # Usually the cursor's member is still there with its score: read on from its rank. The
    # rank and the read are two calls, so the read starts at the cursor's own row and is
    # trusted only if that row is still the cursor's (else something moved: ask again).
    for _ in range(3):
        rank = r.zrevrank(key, after.member)
        if rank is None:
            break
        rows = r.zrange(key, rank, rank + n, desc=True, withscores=True)
        if rows and rows[0][0] == after.member:
            if int(rows[0][1]) == after.score:
                return list(rows[1:])
            break  # it left and came back with another score
    # The cursor's member left (or moved): read from its score on, skipping the rows of that
    # same score that sort before it. Costs as many rows as share that millisecond.
    out: list[tuple[str, float]] = []
    offset, batch = 0, n + 16
    while len(out) < n:
        rows = r.zrange(key, after.score, "-inf", byscore=True, desc=True, offset=offset,
                        num=batch, withscores=True)
        out += [(m, s) for m, s in rows if s < after.score or m < after.member]
        if len(rows) < batch:
            break
        offset += batch
    return out[:n]


def rows_ascending(
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

"""Requests: one, a page of those in a state, many by id; and the queue's lifecycle events."""

from __future__ import annotations

from ..base import QueueBase, int_in, translated
from ..keys import validate_id, validate_task_id
from ..models import STATES, Page, PageCursor, RequestInfo
from .common import PIPELINE_CHUNK, redis_of
from .paging import page


def request(q: QueueBase, request_id: str) -> RequestInfo | None:
    """One request's metadata and counters, or None if unknown."""
    rid = validate_id(request_id, "request id")
    with translated("request"):
        h = redis_of(q).hgetall(q.keys.request(rid))
    return RequestInfo.from_hash(rid, h) if h else None


def requests(
    q: QueueBase, state: str, *, after: PageCursor | None = None, limit: int = 50
) -> Page[RequestInfo]:
    """A page of requests in `state`, newest first (by the time they entered it, then by id);
    pass the returned cursor as `after` for the next page. A full walk sees every request
    that stays in `state` meanwhile exactly once, however many entered it in one millisecond."""
    if state not in STATES:
        raise ValueError(f"unknown state {state!r}; one of {', '.join(STATES)}")
    with translated("requests"):
        rows, cursor = page(q, q.keys.state_index(state), after, limit)
        pipe = redis_of(q).pipeline(transaction=False)
        for rid, _ in rows:
            pipe.hgetall(q.keys.request(rid))
        hashes = pipe.execute()
    out = [RequestInfo.from_hash(rid, h) for (rid, _), h in zip(rows, hashes, strict=True) if h]
    return Page(out, cursor)


def requests_many(q: QueueBase, request_ids: list[str]) -> dict[str, RequestInfo]:
    """These requests as Redis has them (a round trip per PIPELINE_CHUNK); those it no longer
    has are left out."""
    ids = [validate_id(rid, "request id") for rid in request_ids]
    out: dict[str, RequestInfo] = {}
    for i in range(0, len(ids), PIPELINE_CHUNK):
        part = ids[i : i + PIPELINE_CHUNK]
        pipe = redis_of(q).pipeline(transaction=False)
        for rid in part:
            pipe.hgetall(q.keys.request(rid))
        with translated("requests"):
            hashes = pipe.execute()
        out |= {rid: RequestInfo.from_hash(rid, h)
                for rid, h in zip(part, hashes, strict=True) if h and h.get("state")}
    return out


def events_since(
    q: QueueBase, since_ms: int, *, count: int = 1000
) -> list[tuple[str, dict[str, str]]]:
    """The queue's lifecycle events (its capped `events` stream) from `since_ms` on, oldest
    first, at most `count`: (entry id, fields)."""
    with translated("events"):
        rows = redis_of(q).xrange(q.keys.events, max(0, int(since_ms)), "+",
                                  count=int_in(count, "count", 1, 100_000))
    return [(eid, dict(fields)) for eid, fields in rows]


def events_after(
    q: QueueBase, entry_id: str, *, count: int = 1000
) -> list[tuple[str, dict[str, str]]]:
    """The queue's lifecycle events after the entry `entry_id` (a cursor: the last one
    read), oldest first, at most `count`: (entry id, fields)."""
    after = validate_task_id(entry_id)
    with translated("events"):
        rows = redis_of(q).xrange(q.keys.events, f"({after}", "+",
                                  count=int_in(count, "count", 1, 100_000))
    return [(eid, dict(fields)) for eid, fields in rows]


def unique_holder(q: QueueBase, key: str) -> str | None:
    """The id of the request that holds the unique key `key` now (core.queue.unique), or
    None: no request holds it (or its hold has lapsed; a submit would take it)."""
    with translated("unique_holder"):
        holder: str | None = q.redis.get(q.keys.unique(key))
    return holder

"""Read-only views of a queue for the console and `queuestat`: indexes only, no KEYS/SCAN."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import redis

from . import metrics as _metrics
from . import registry
from .base import int_in
from .client import Queue, translated
from .errors import InvalidInput
from .keys import MAX_TASK_ID, validate_id, validate_task_id
from .models import (
    STATES,
    DeadLetter,
    Page,
    PageCursor,
    PendingEntry,
    RequestInfo,
    WorkerInfo,
)

MAX_PAGE = 1000  # rows per page
SCHED_MARK = "~scheduled"  # the scheduled requests' head in `delayed` (see _common.lua)
HOUR_MS = 3_600_000


def _r(q: Queue) -> Any:
    """The queue's client, untyped: redis-py types replies as bytes | str whatever the
    connection decodes; ours always decodes to str."""
    return q.redis


@dataclass(frozen=True)
class QueueStats:
    queue: str
    waiting: int
    waiting_by_priority: dict[int, int]
    leased: int
    delayed: int
    dead: int
    requests_by_state: dict[str, int]
    workers: int
    totals: dict[str, int] = field(default_factory=dict)
    paused: bool = False  # Operator.pause(): workers lease nothing from it
    scheduled: int = 0  # delayed requests waiting for their due time
    due_next_hour: int = 0  # of them, those due within the hour (or overdue, not yet promoted)

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "waiting": self.waiting,
            "waiting_by_priority": {str(k): v for k, v in self.waiting_by_priority.items()},
            "leased": self.leased,
            "delayed": self.delayed,
            "dead": self.dead,
            "requests": self.requests_by_state,
            "workers": self.workers,
            "totals": self.totals,
            "paused": self.paused,
            "scheduled": self.scheduled,
            "due_next_hour": self.due_next_hour,
        }


def queues(client: Any, *, prefix: str = "qa") -> list[str]:
    """Every queue under `prefix` that a producer or worker has used, sorted by name; one
    command (the registry zset, see registry.py), never KEYS or SCAN."""
    return registry.names(client, prefix=prefix)


def stats(q: Queue, *, worker_timeout_ms: int = 15_000) -> QueueStats:
    """Depths (waiting per priority, leased, delayed, dead), requests per state, live workers."""
    k = q.keys
    now = q.now_ms()
    with translated("stats"):
        pipe = _r(q).pipeline(transaction=False)
        pipe.hgetall(k.stats).zcard(k.leases).zcard(k.delayed).xlen(k.dead)
        for s in STATES:
            pipe.zcard(k.state_index(s))
        pipe.zcount(k.workers, now - worker_timeout_ms, "+inf")
        pipe.exists(k.paused)
        pipe.zscore(k.delayed, SCHED_MARK).zcard(k.scheduled)
        pipe.zcount(k.scheduled, "-inf", now + HOUR_MS)
        r = pipe.execute()
    mark, scheduled, due_soon = r[-3:]
    r = r[:-3]
    raw: dict[str, str] = r[0]
    by_prio = {int(f[2:]): int(v) for f, v in raw.items() if f.startswith("w:") and int(v)}
    totals = {f: int(v) for f, v in raw.items() if not f.startswith("w:")}
    return QueueStats(
        queue=q.name,
        waiting=sum(by_prio.values()),
        waiting_by_priority=dict(sorted(by_prio.items(), reverse=True)),
        leased=r[1],
        delayed=r[2] - (mark is not None),  # retries: the mark is not one
        dead=r[3],
        requests_by_state=dict(zip(STATES, r[4 : 4 + len(STATES)], strict=True)),
        workers=r[-2],
        totals=totals,
        paused=bool(r[-1]),
        scheduled=scheduled,
        due_next_hour=due_soon,
    )


def request(q: Queue, request_id: str) -> RequestInfo | None:
    """One request's metadata and counters, or None if unknown."""
    rid = validate_id(request_id, "request id")
    with translated("request"):
        h = _r(q).hgetall(q.keys.request(rid))
    return RequestInfo.from_hash(rid, h) if h else None


def requests(
    q: Queue, state: str, *, after: PageCursor | None = None, limit: int = 50
) -> Page[RequestInfo]:
    """A page of requests in `state`, newest first (by the time they entered it, then by id);
    pass the returned cursor as `after` for the next page. A full walk sees every request
    that stays in `state` meanwhile exactly once, however many entered it in one millisecond."""
    if state not in STATES:
        raise ValueError(f"unknown state {state!r}; one of {', '.join(STATES)}")
    with translated("requests"):
        rows, cursor = _page(q, q.keys.state_index(state), after, limit)
        pipe = _r(q).pipeline(transaction=False)
        for rid, _ in rows:
            pipe.hgetall(q.keys.request(rid))
        hashes = pipe.execute()
    out = [RequestInfo.from_hash(rid, h) for (rid, _), h in zip(rows, hashes, strict=True) if h]
    return Page(out, cursor)


def _page(
    q: Queue, key: str, after: PageCursor | None, limit: int
) -> tuple[list[tuple[str, int]], PageCursor | None]:
    """One page of a zset as (member, score), highest score first and, within a score,
    highest member first (Redis' reverse order); and the cursor for the next page. Runs
    inside translated()."""
    int_in(limit, "limit", 1, MAX_PAGE)
    if after is None:
        rows = _r(q).zrange(key, 0, limit, desc=True, withscores=True)
    else:
        rows = _rows_after(q, key, after, limit + 1)
    page = [(member, int(score)) for member, score in rows[:limit]]
    cursor = PageCursor(page[-1][1], page[-1][0]) if len(rows) > limit else None
    return page, cursor


def _rows_after(q: Queue, key: str, after: PageCursor, n: int) -> list[tuple[str, float]]:
    """Up to `n` rows that sort after the cursor's row."""
    r = _r(q)
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


def pending(q: Queue, request_id: str, *, after: str = "-", count: int = 50) -> list[PendingEntry]:
    """A page of a request's pending entries: leased tasks with their lease expiry (or, for
    one an operator released or claimed while its holder may still run it, when it moves on
    at the latest), and parked ones (consumer "~waiting", "~delayed" or "~dead")."""
    rid = validate_id(request_id, "request id")
    start = after if after == "-" else f"({validate_task_id(after)}"
    if after == MAX_TASK_ID:
        return []  # nothing can come after it (Redis refuses the exclusive range)
    with translated("pending"):
        try:
            rows = _r(q).xpending_range(q.keys.tasks(rid), "g", start, "+", count)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            return []  # a finished request's stream is gone: nothing is pending
        pipe = _r(q).pipeline(transaction=False)
        tokens = [f"{rid}/{r['message_id']}/{r['times_delivered']}" for r in rows]
        if tokens:
            pipe.zmscore(q.keys.leases, tokens).zmscore(q.keys.revoked, tokens)
            expiries, revoked = pipe.execute()
        else:
            expiries = revoked = []
    return [
        PendingEntry(
            task_id=r["message_id"],
            consumer=r["consumer"],
            idle_ms=int(r["time_since_delivered"]),
            deliveries=int(r["times_delivered"]),
            lease_expires_ms=int(e) if e is not None else None,
            moves_by_ms=int(m) if m is not None else None,
        )
        for r, e, m in zip(rows, expiries, revoked, strict=True)
    ]


def dead_letters(q: Queue, *, before: str | None = None, count: int = 50) -> list[DeadLetter]:
    """A page of dead letters, newest first; pass the last id as `before` for the next."""
    top = "+" if before is None else f"({before}"
    with translated("dead_letters"):
        rows = _r(q).xrevrange(q.keys.dead, top, "-", count=count)
    return [DeadLetter.from_entry(eid, f) for eid, f in rows]


def request_dead_letters(q: Queue, request_id: str) -> list[DeadLetter]:
    """The dead letters of one request (its tasks out of attempts), oldest first: read by
    name through the request's task -> letter map, no scan of the dead stream."""
    rid = validate_id(request_id, "request id")
    r = _r(q)
    ids = sorted(set(r.hvals(q.keys.dead_map(rid))))
    if not ids:
        return []
    pipe = r.pipeline(transaction=False)
    for did in ids:
        pipe.xrange(q.keys.dead, did, did)
    return [DeadLetter.from_entry(eid, fields)
            for rows in pipe.execute() for eid, fields in rows]


def workers(q: Queue, *, after: PageCursor | None = None, limit: int = 50) -> Page[WorkerInfo]:
    """A page of registered workers, most recent heartbeat first; pass the returned cursor as
    `after` for the next page. Workers gone longer than prune.WORKER_RETENTION_MS are pruned
    by the reaper; until then they are listed with their last beat (and empty info once
    their entry has expired)."""
    with translated("workers"):
        rows, cursor = _page(q, q.keys.workers, after, limit)
        pipe = _r(q).pipeline(transaction=False)
        for name, _ in rows:
            pipe.hget(q.keys.worker(name), "info")
        infos = pipe.execute()
    items = [_worker(name, score, info) for (name, score), info in zip(rows, infos, strict=True)]
    return Page(items, cursor)


def _worker(name: str, score: int, text: str | None) -> WorkerInfo:
    """A registry entry as its worker wrote it: an entry that is not a JSON object (another
    client's, a broken writer's) is kept as text, so one odd worker breaks no reader."""
    if not text:
        return WorkerInfo(name, score, {})
    try:
        info = json.loads(text)
    except ValueError:
        info = None
    if isinstance(info, dict):
        return WorkerInfo(name, score, info)
    return WorkerInfo(name, score, {}, text)


def drained(q: Queue) -> bool:
    """True when nothing in the queue is waiting, delayed (a retry or a scheduled request)
    or leased (a lease an operator revoked included: its task moves on once its old run is
    over)."""
    with translated("drained"):
        stats, leased, delayed, revoked, mark, scheduled = (
            _r(q).pipeline(transaction=False)
            .hgetall(q.keys.stats).zcard(q.keys.leases).zcard(q.keys.delayed)
            .zcard(q.keys.revoked).zscore(q.keys.delayed, SCHED_MARK).zcard(q.keys.scheduled)
            .execute()
        )
    waiting = sum(int(v) for k, v in stats.items() if k.startswith("w:"))
    delayed -= mark is not None
    return waiting == 0 and leased == 0 and delayed == 0 and revoked == 0 and scheduled == 0


def scheduled(
    q: Queue, *, after: PageCursor | None = None, limit: int = 50
) -> Page[RequestInfo]:
    """A page of delayed requests, soonest due first (then by id); pass the returned cursor
    as `after` for the next page. Each row's `due_ms` is its due time."""
    int_in(limit, "limit", 1, MAX_PAGE)
    key = q.keys.scheduled
    with translated("scheduled"):
        r = _r(q)
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


def due_within(q: Queue, ms: int) -> int:
    """How many delayed requests are due within `ms` from now (overdue ones included)."""
    now = q.now_ms()
    with translated("due_within"):
        return int(_r(q).zcount(q.keys.scheduled, "-inf", now + ms))


MAX_METRIC_MINUTES = _metrics.KEEP_MS // _metrics.MINUTE_MS + 1  # more are never kept


def handler_metrics(
    q: Queue, first: int, last: int | None = None
) -> dict[int, dict[str, _metrics.HandlerCounts]]:
    """Per-handler counts of the minutes `first`..`last` (minutes since the epoch, both
    included; `last` default: the current minute), as minute -> handler -> counts, minutes
    without any left out. One pipelined HGETALL per minute (their keys are named by the
    minute: no scan); at most a day's minutes, which is all Redis keeps."""
    if last is None:
        last = _metrics.minute_of(q.now_ms())
    int_in(first, "first minute", 0)
    int_in(last, "last minute", first)
    if last - first >= MAX_METRIC_MINUTES:
        raise InvalidInput(f"at most {MAX_METRIC_MINUTES} minutes at once")
    minutes = range(first, last + 1)
    with translated("handler metrics"):
        pipe = _r(q).pipeline(transaction=False)
        for m in minutes:
            pipe.hgetall(q.keys.metrics(m))
        replies = pipe.execute()
    return {m: _metrics.parse(h) for m, h in zip(minutes, replies, strict=True) if h}


def current_minute(q: Queue) -> int:
    """The minute the engine counts in now (the Redis server's clock, or the injected one)."""
    return _metrics.minute_of(q.now_ms())

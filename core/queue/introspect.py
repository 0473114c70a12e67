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
from .keys import GROUP, MAX_TASK_ID, validate_id, validate_task_id
from .models import (
    STATES,
    DeadLetter,
    LogLine,
    Page,
    PageCursor,
    PendingEntry,
    RequestInfo,
    TaskProgress,
    WorkerInfo,
)
from .results import task_order

MAX_PAGE = 1000  # rows per page
PIPELINE_CHUNK = 500  # commands per pipelined round trip of the bulk reads
SCHED_MARK = "~scheduled"  # the scheduled requests' head in `delayed` (see lua/_base.lua)
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
            rows = _r(q).xpending_range(q.keys.tasks(rid), GROUP, start, "+", count)
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


def progress(q: Queue, request_id: str) -> list[TaskProgress]:
    """What the request's tasks last reported (ctx.progress, ctx.log), most recent first,
    each marked running or not: at most the 64 tasks that reported last (the engine keeps no
    more), so two round trips whatever the request's size."""
    rid = validate_id(request_id, "request id")
    with translated("progress"):
        pipe = _r(q).pipeline(transaction=False)
        pipe.hgetall(q.keys.progress(rid)).zrange(q.keys.progress_at(rid), 0, -1, desc=True,
                                                  withscores=True)
        fields, order = pipe.execute()
        # Which of them are leased now: their pending entry's holder is a worker.
        pipe = _r(q).pipeline(transaction=False)
        for tid, _ in order:
            pipe.xpending_range(q.keys.tasks(rid), "g", tid, tid, 1)
        held = pipe.execute(raise_on_error=False) if order else []
    running = {tid for (tid, _), rows in zip(order, held, strict=True)
               if isinstance(rows, list) and rows and not rows[0]["consumer"].startswith("~")}
    return [_progress(tid, fields.get(tid), fields.get(f"{tid}:log"), int(at), tid in running)
            for tid, at in order]


def task_progress(q: Queue, tasks: list[tuple[str, str]]) -> dict[tuple[str, str], TaskProgress]:
    """The last progress of these (request id, task id) pairs, those that reported any (one
    round trip): what the workers page shows of the tasks each worker says it runs (their
    `running` is not looked up: False)."""
    pairs = [(validate_id(rid, "request id"), validate_task_id(tid)) for rid, tid in tasks]
    if not pairs:
        return {}
    with translated("task progress"):
        pipe = _r(q).pipeline(transaction=False)
        for rid, tid in pairs:
            pipe.hmget(q.keys.progress(rid), [tid, f"{tid}:log"])
            pipe.zscore(q.keys.progress_at(rid), tid)
        got = pipe.execute()
    out = {}
    for i, (rid, tid) in enumerate(pairs):
        (text, log), at = got[2 * i], got[2 * i + 1]
        if at is not None:
            out[(rid, tid)] = _progress(tid, text, log, int(at))
    return out


def _progress(tid: str, text: str | None, log: str | None, at: int,
              running: bool = False) -> TaskProgress:
    """One task's entry as the engine wrote it (progress.lua); an odd one reads as empty."""
    p: Any = _json(text, dict) or {}
    lines = _json(log, list) or []

    def num(v: Any) -> float | None:
        return v if isinstance(v, int | float) and not isinstance(v, bool) else None

    return TaskProgress(
        task_id=tid, done=num(p.get("done")), total=num(p.get("total")),
        message=str(p.get("msg") or ""), worker=str(p.get("worker") or ""), updated_ms=at,
        log=tuple(LogLine(int(e[0]), str(e[1])) for e in lines
                  if isinstance(e, list) and len(e) == 2 and num(e[0]) is not None),
        running=running,
    )


def _json(text: str | None, kind: type) -> Any:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, kind) else None


def task_payloads(q: Queue, request_id: str, task_ids: list[str]) -> dict[str, str]:
    """The payloads (JSON text, as submitted) of these tasks of a request, in one pipelined
    read; a task id the request does not hold is left out."""
    validate_id(request_id, "request id")
    ids = [validate_task_id(t) for t in task_ids]
    if not ids:
        return {}
    stream = q.keys.tasks(request_id)
    pipe = _r(q).pipeline(transaction=False)
    for tid in ids:
        pipe.xrange(stream, tid, tid)
    with translated("task payloads"):
        replies = pipe.execute()
    return {tid: fields.get("p", "") for rows in replies for tid, fields in rows}


def first_payloads(q: Queue, request_id: str, n: int) -> list[tuple[str, str]]:
    """The request's first `n` tasks: (task id, payload JSON text)."""
    validate_id(request_id, "request id")
    with translated("task payloads"):
        rows = _r(q).xrange(q.keys.tasks(request_id), "-", "+", count=int_in(n, "n", 1,
                                                                                MAX_PAGE))
    return [(eid, fields.get("p", "")) for eid, fields in rows]


def requests_many(q: Queue, request_ids: list[str]) -> dict[str, RequestInfo]:
    """These requests as Redis has them (a round trip per PIPELINE_CHUNK); those it no longer
    has are left out."""
    ids = [validate_id(rid, "request id") for rid in request_ids]
    out: dict[str, RequestInfo] = {}
    for i in range(0, len(ids), PIPELINE_CHUNK):
        part = ids[i : i + PIPELINE_CHUNK]
        pipe = _r(q).pipeline(transaction=False)
        for rid in part:
            pipe.hgetall(q.keys.request(rid))
        with translated("requests"):
            hashes = pipe.execute()
        out |= {rid: RequestInfo.from_hash(rid, h)
                for rid, h in zip(part, hashes, strict=True) if h and h.get("state")}
    return out


def events_since(q: Queue, since_ms: int, *, count: int = 1000) -> list[tuple[str, dict[str, str]]]:
    """The queue's lifecycle events (its capped `events` stream) from `since_ms` on, oldest
    first, at most `count`: (entry id, fields)."""
    with translated("events"):
        rows = _r(q).xrange(q.keys.events, max(0, int(since_ms)), "+",
                            count=int_in(count, "count", 1, 100_000))
    return [(eid, dict(fields)) for eid, fields in rows]


def heartbeat(q: Queue, worker: str) -> tuple[int | None, str | None]:
    """A worker's last heartbeat (ms on the Redis clock; None: not registered) and its info
    (JSON text as the worker wrote it, not trusted)."""
    with translated("worker"):
        beat, info = (_r(q).pipeline(transaction=False).zscore(q.keys.workers, worker)
                      .hget(q.keys.worker(worker), "info").execute())
    return (None if beat is None else int(beat)), info


def dead_letters_present(q: Queue, entry_ids: list[str]) -> set[str]:
    """Those of these dead letters still in the queue's dead-letter stream (one round trip,
    CHUNK ids a pipeline)."""
    ids = [validate_task_id(i) for i in entry_ids]
    present: set[str] = set()
    for i in range(0, len(ids), PIPELINE_CHUNK):
        part = ids[i : i + PIPELINE_CHUNK]
        pipe = _r(q).pipeline(transaction=False)
        for eid in part:
            pipe.xrange(q.keys.dead, eid, eid, count=1)
        with translated("dead letters"):
            present |= {eid for eid, rows in zip(part, pipe.execute(), strict=True) if rows}
    return present


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


@dataclass(frozen=True)
class ResultsPage:
    """Some of a request's results: (task id, JSON text) in task order within the page."""

    items: list[tuple[str, str]]
    cursor: int  # where the next page starts (pass it back); 0 after the last page
    total: int  # results the request keeps


MAX_RESULTS_CURSOR = 2**64 - 1


def results(q: Queue, request_id: str, *, cursor: int = 0, count: int = 50) -> ResultsPage:
    """A page of a request's results (results.py), about `count` of them: an HSCAN cursor
    over the request's own results hash, so a page costs its size however many it keeps.
    Pages follow the hash's order; a small request's results come as one page."""
    rid = validate_id(request_id, "request id")
    int_in(cursor, "results cursor", 0, MAX_RESULTS_CURSOR)
    int_in(count, "count", 1, MAX_PAGE)
    key = q.keys.results(rid)
    with translated("results"):
        pipe = _r(q).pipeline(transaction=False)
        pipe.hlen(key)
        pipe.hscan(key, cursor, count=count)
        total, (after, found) = pipe.execute()
    return ResultsPage(sorted(found.items(), key=lambda kv: task_order(kv[0])), int(after),
                       int(total))


def result_text(q: Queue, request_id: str, task_id: str) -> str | None:
    """One task's result as its JSON text, whole; None if it has none (yet, or any more)."""
    rid = validate_id(request_id, "request id")
    with translated("result"):
        text = _r(q).hget(q.keys.results(rid), validate_task_id(task_id))
    return None if text is None else str(text)


def workers(q: Queue, *, after: PageCursor | None = None, limit: int = 50) -> Page[WorkerInfo]:
    """A page of registered workers, most recent heartbeat first; pass the returned cursor as
    `after` for the next page. Workers gone longer than prune.WORKER_RETENTION_MS are pruned
    by the reaper; until then they are listed with their last beat (and empty info once
    their entry has expired)."""
    with translated("workers"):
        rows, cursor = _page(q, q.keys.workers, after, limit)
        pipe = _r(q).pipeline(transaction=False)
        for name, _ in rows:
            pipe.hmget(q.keys.worker(name), "info", "control")
        infos = pipe.execute()
    items = [_worker(name, score, info, control or "")
             for (name, score), (info, control) in zip(rows, infos, strict=True)]
    return Page(items, cursor)


def worker(q: Queue, name: str) -> WorkerInfo | None:
    """One registered worker's entry, or None if `name` is not in the queue's registry."""
    validate_id(name, "worker name")
    with translated("worker"):
        score, (info, control) = (_r(q).pipeline(transaction=False)
                                  .zscore(q.keys.workers, name)
                                  .hmget(q.keys.worker(name), "info", "control").execute())
    return None if score is None else _worker(name, int(score), info, control or "")


def _worker(name: str, score: int, text: str | None, control: str = "") -> WorkerInfo:
    """A registry entry as its worker wrote it: an entry that is not a JSON object (another
    client's, a broken writer's) is kept as text, so one odd worker breaks no reader."""
    if not text:
        return WorkerInfo(name, score, {}, control=control)
    try:
        info = json.loads(text)
    except ValueError:
        info = None
    if isinstance(info, dict):
        return WorkerInfo(name, score, info, control=control)
    return WorkerInfo(name, score, {}, text, control=control)


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


# -- leased tasks across a queue (the console's pending page) ------------------------------


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


def leased(q: Queue, *, after: PageCursor | None = None, limit: int = 50) -> LeasedPage:
    """Every leased task of the queue, soonest expiry (longest overdue) first, a page after
    `after`, with its pending-entry row and its consumer's heartbeat: three round trips
    whatever the number of leases."""
    n = int_in(limit, "limit", 1, MAX_PAGE)
    k, r = q.keys, _r(q)
    with translated("leased tasks"):
        now = q.now_ms()
        rows = _zpage_ascending(r, k.leases, after, n + 1)
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


def _zpage_ascending(
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


@dataclass(frozen=True)
class Attention:
    """What the console's overview flags beside the queue's counters."""

    now_ms: int
    registered_workers: int  # in the registry, live or not
    expired_leases: int  # past their expiry, not reaped yet
    oldest_waiting_ms: int | None  # creation time of the oldest active request with work
    # waiting (among the `checked` oldest active ones); None if none of them waits


def attention(q: Queue, *, checked: int = 20) -> Attention:
    """Two round trips: the registry's size, the expired leases, the oldest active
    requests, then whether those have work waiting."""
    k, r = q.keys, _r(q)
    n = int_in(checked, "checked", 1, MAX_PAGE)
    with translated("attention"):
        now = q.now_ms()
        pipe = r.pipeline(transaction=False)
        pipe.zcard(k.workers)
        pipe.zcount(k.leases, "-inf", f"({now}")
        pipe.zrange(k.state_index("active"), 0, n - 1)
        registered, expired, oldest = pipe.execute()
        oldest_waiting = None
        if oldest:
            pipe = r.pipeline(transaction=False)
            for rid in oldest:
                pipe.hmget(k.request(rid), "waiting", "delayed", "created_ms")
            for waiting, delayed, created in pipe.execute():
                if int(waiting or 0) + int(delayed or 0) > 0 and created:
                    oldest_waiting = int(created)
                    break
    return Attention(now, int(registered), int(expired), oldest_waiting)


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

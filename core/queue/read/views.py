"""A page's figures at one moment: the queue's counters and the page's lists read in one
MULTI/EXEC, so that they all agree, then the details of what they list right after (the
console's request, workers and pending pages)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ..base import QueueBase, int_in, translated
from ..keys import GROUP, MAX_TASK_ID, validate_id, validate_task_id
from ..models import (
    DeadLetter,
    Page,
    PageCursor,
    PendingEntry,
    RequestInfo,
    TaskProgress,
    WorkerInfo,
)
from .common import (
    MAX_PAGE,
    entries,
    no_group,
    pel_row,
    raised,
    redis_of,
    rows_of,
    scanned,
    sid,
)
from .leases import LeasedPage, leased_page
from .paging import rows_after, rows_ascending
from .progress import progress_of
from .results import MAX_RESULTS_CURSOR, ResultsPage, task_order
from .stats import STATS_REPLIES, QueueStats, stats_of, stats_read
from .tasks import lease_scores, pending_entries
from .workers import STOPPED_FIELDS, StoppedWorker, stopped_of, worker_of


@dataclass(frozen=True)
class LeasedView:
    """The pending page at one moment: the queue's counters (its header and its total) and
    the first page of its leases in one MULTI/EXEC; their entries and consumers right after
    (a later page reads its rows after the moment)."""

    stats: QueueStats
    registered_workers: int
    expired_leases: int
    page: LeasedPage


def leased_view(
    q: QueueBase, *, after: PageCursor | None = None, limit: int = 50,
    worker_timeout_ms: int = 15_000,
) -> LeasedView:
    """See LeasedView and leased()."""
    n = int_in(limit, "limit", 1, MAX_PAGE)
    k, r = q.keys, redis_of(q)
    with translated("leased tasks"):
        now = q.now_ms()
        pipe = r.pipeline(transaction=True)
        stats_read(q, pipe, now, worker_timeout_ms)
        pipe.zcard(k.workers).zcount(k.leases, "-inf", f"({now}")
        if after is None:
            pipe.zrange(k.leases, 0, n, withscores=True)
        got = pipe.execute()
        m = STATS_REPLIES
        rows = got[m + 2] if after is None else rows_ascending(r, k.leases, after, n + 1)
        return LeasedView(stats_of(q, got[:m], now), int(got[m]), int(got[m + 1]),
                          leased_page(q, now, list(rows), n))


@dataclass(frozen=True)
class WorkersView:
    """The workers page at one moment: the queue's counters (its header), a page of the
    registry, and the stopped workers, read in one MULTI/EXEC; their entries right after."""

    now_ms: int
    stats: QueueStats
    registered_workers: int
    expired_leases: int
    workers: Page[WorkerInfo]
    stopped: list[StoppedWorker]  # listed with the first page only


def workers_view(
    q: QueueBase, *, after: PageCursor | None = None, limit: int = 50, stopped: int = 50,
    worker_timeout_ms: int = 15_000,
) -> WorkersView:
    """See WorkersView. A page after the first reads its rows after the moment (their
    cursor may need more than one read)."""
    int_in(limit, "limit", 1, MAX_PAGE)
    int_in(stopped, "stopped", 1, MAX_PAGE)
    k, r = q.keys, redis_of(q)
    now = q.now_ms()
    with translated("workers view"):
        pipe = r.pipeline(transaction=True)
        stats_read(q, pipe, now, worker_timeout_ms)
        pipe.zcard(k.workers).zcount(k.leases, "-inf", f"({now}")
        if after is None:
            pipe.zrange(k.workers, 0, limit, desc=True, withscores=True)
            pipe.zrange(k.stopped_workers, 0, stopped - 1, desc=True, withscores=True)
        got = pipe.execute()
        n = STATS_REPLIES
        stats = stats_of(q, got[:n], now)
        registered, expired = got[n : n + 2]
        if after is None:
            rows, stopped_rows = got[n + 2], got[n + 3]
        else:
            rows, stopped_rows = rows_after(q, k.workers, after, limit + 1), []
        page = [(member, int(score)) for member, score in rows[:limit]]
        cursor = PageCursor(page[-1][1], page[-1][0]) if len(rows) > limit else None
        pipe = r.pipeline(transaction=False)
        for name, _ in page:
            pipe.hmget(k.worker(name), "info", "control")
        for name, _ in stopped_rows:
            pipe.hmget(k.worker(name), *STOPPED_FIELDS)
        entries = pipe.execute() if page or stopped_rows else []
    infos, rest = entries[: len(page)], entries[len(page) :]
    items = [worker_of(name, score, info, control or "")
             for (name, score), (info, control) in zip(page, infos, strict=True)]
    return WorkersView(now, stats, int(registered), int(expired), Page(items, cursor),
                       stopped_of(q, stopped_rows, rest))


@dataclass(frozen=True)
class RequestView:
    """A request and its queue at one moment: every count, state and list of the request page
    (the queue's counters for its header included) read in one MULTI/EXEC, so that they all
    agree; then, in one more round trip, the details of what it lists (payload text, lease
    expiries, dead letters' errors, whether a reporting task is leased). A detail whose
    subject moved on between the two is missing (None, or left out), never contradicting."""

    now_ms: int
    stats: QueueStats
    registered_workers: int  # in the registry, live or not
    expired_leases: int  # leases of the queue past their expiry, not reaped yet
    info: RequestInfo | None  # None: Redis no longer holds the request
    pending: list[PendingEntry]  # a page of its pending entries
    payloads: dict[str, str]  # those entries' payloads
    first: list[tuple[str, str]]  # its first tasks: (task id, payload)
    progress: list[TaskProgress]  # what its tasks reported, running ones first
    dead_letters: list[DeadLetter]  # some of its dead letters still dead, newest first
    results: ResultsPage
    events: list[tuple[str, dict[str, str]]]  # its events still in `events`, oldest first


DEAD_SCAN = 100  # dead-letter ids of a request read at once (HSCAN COUNT)


def request_view(
    q: QueueBase, request_id: str, *, pending_after: str = "-", pending_count: int = 50,
    first_tasks: int = 5, results_cursor: int = 0, results_count: int = 50,
    letters: int = 20, events_after: str | None = None, events_since_ms: int | None = None,
    events_count: int = 500, worker_timeout_ms: int = 15_000,
) -> RequestView:
    """The request page's read (see RequestView). Its events: those of the queue's `events`
    stream newer than `events_after` (what the caller already has of them: the database's),
    among the newest `events_count` entries; and with `events_since_ms`, also among the
    first `events_count` from that time on (for a request whose history has none)."""
    ask = _RequestAsk(validate_id(request_id, "request id"), pending_after, pending_count,
                      first_tasks, results_cursor, results_count, letters, events_after,
                      events_since_ms, events_count)
    ask.check()
    now = q.now_ms()
    with translated("request view"):
        moment = _request_moment(q, ask, now, worker_timeout_ms)
        details = _request_details(q, ask, moment)
    return _request_view(ask, now, moment, details)


@dataclass(frozen=True)
class _RequestAsk:
    """What the request page asks of request_view()."""

    rid: str
    pending_after: str
    pending_count: int
    first_tasks: int
    results_cursor: int
    results_count: int
    letters: int
    events_after: str | None
    events_since_ms: int | None
    events_count: int

    def check(self) -> None:
        if self.pending_after != "-":
            validate_task_id(self.pending_after)
        for value, name in ((self.pending_count, "pending_count"),
                            (self.first_tasks, "first_tasks"),
                            (self.results_count, "results_count"), (self.letters, "letters"),
                            (self.events_count, "events_count")):
            int_in(value, name, 1, MAX_PAGE)
        int_in(self.results_cursor, "results cursor", 0, MAX_RESULTS_CURSOR)
        if self.events_after is not None:
            validate_task_id(self.events_after)


class _RequestMoment(NamedTuple):
    """The replies of the request page's MULTI/EXEC, parsed."""

    stats: QueueStats
    registered: int
    expired: int
    h: dict[str, str]
    pel: list[dict[str, Any]]
    first: list[tuple[str, dict[str, str]]]
    prog: dict[str, str]
    prog_order: list[tuple[str, float]]
    dead_scan: tuple[int, dict[str, str]]
    results_total: int
    results_scan: tuple[int, dict[str, str]]
    events: list[tuple[str, dict[str, str]]]  # the oldest asked for, then the newest


def _request_moment(
    q: QueueBase, ask: _RequestAsk, now: int, worker_timeout_ms: int
) -> _RequestMoment:
    """Everything the request page counts and lists, in one MULTI/EXEC."""
    k, rid = q.keys, ask.rid
    pipe = redis_of(q).pipeline(transaction=True)
    stats_read(q, pipe, now, worker_timeout_ms)
    pipe.zcard(k.workers).zcount(k.leases, "-inf", f"({now}")
    pipe.hgetall(k.request(rid))
    if ask.pending_after == MAX_TASK_ID:
        pipe.exists(k.tasks(rid))  # nothing can come after it: a placeholder reply
    else:
        start = "-" if ask.pending_after == "-" else f"({ask.pending_after}"
        pipe.xpending_range(k.tasks(rid), GROUP, start, "+", ask.pending_count)
    pipe.xrange(k.tasks(rid), "-", "+", count=ask.first_tasks)
    pipe.hgetall(k.progress(rid)).zrange(k.progress_at(rid), 0, -1, desc=True,
                                         withscores=True)
    pipe.hscan(k.dead_map(rid), 0, count=DEAD_SCAN)
    pipe.hlen(k.results(rid)).hscan(k.results(rid), ask.results_cursor,
                                    count=ask.results_count)
    newer = f"({ask.events_after}" if ask.events_after else "-"
    pipe.xrevrange(k.events, "+", newer, count=ask.events_count)
    if ask.events_since_ms is not None:
        pipe.xrange(k.events, max(0, int(ask.events_since_ms)), "+", count=ask.events_count)
    return _moment_of(q, ask, now, pipe.execute(raise_on_error=False))


def _moment_of(q: QueueBase, ask: _RequestAsk, now: int, got: list[Any]) -> _RequestMoment:
    """_request_moment()'s replies, raising the first error but XPENDING's NOGROUP."""
    n = STATS_REPLIES
    stats = stats_of(q, raised(got[:n]), now)
    (registered, expired, h, pel, first, prog, prog_order, dead_scan, results_total,
     results_scan, newest) = got[n : n + 11]
    oldest = got[n + 11] if ask.events_since_ms is not None else []
    registered, expired, h, first, prog, prog_order, dead_scan = raised(
        [registered, expired, h, first, prog, prog_order, dead_scan])
    results_total, results_scan, newest, oldest = raised(
        [results_total, results_scan, newest, oldest])
    # A cluster client's transaction leaves some replies unparsed: the same shapes here.
    return _RequestMoment(
        stats, registered, expired, h, [pel_row(row) for row in no_group(pel)], entries(first),
        prog, prog_order, scanned(dead_scan), results_total, scanned(results_scan),
        [*entries(oldest), *entries(newest)])


class _RequestDetails(NamedTuple):
    """The replies of the details read after the moment, and what they answer."""

    replies: list[Any]
    leases_read: bool  # the first two replies are the pending entries' lease scores
    held: dict[str, str]  # task id -> its holder, of the pending entries listed
    unknown: list[str]  # reporting tasks not listed: their holders are read
    dead_ids: list[str]  # the dead letters read


def _request_details(q: QueueBase, ask: _RequestAsk, m: _RequestMoment) -> _RequestDetails:
    """The details of what the moment listed, in one more round trip."""
    k, rid = q.keys, ask.rid
    pipe = redis_of(q).pipeline(transaction=False)
    leases_read = lease_scores(q, pipe, rid, m.pel)
    for row in m.pel:
        tid = row["message_id"]
        pipe.xrange(k.tasks(rid), tid, tid)
    held = {row["message_id"]: row["consumer"] for row in m.pel}
    unknown = [tid for tid, _ in m.prog_order if tid not in held]
    for tid in unknown:
        pipe.xpending_range(k.tasks(rid), GROUP, tid, tid, 1)
    dead_ids = sorted(set(m.dead_scan[1].values()), key=sid, reverse=True)[:ask.letters]
    for did in dead_ids:
        pipe.xrange(k.dead, did, did)
    replies = pipe.execute(raise_on_error=False) if len(pipe) else []
    return _RequestDetails(replies, leases_read, held, unknown, dead_ids)


def _request_view(ask: _RequestAsk, now: int, m: _RequestMoment,
                  d: _RequestDetails) -> RequestView:
    """The moment and its details as the request page shows them."""
    rest = iter(d.replies)
    expiries, revoked = raised([next(rest), next(rest)]) if d.leases_read else ([], [])
    payloads = {}
    for row in m.pel:
        if (rows := rows_of(next(rest))):
            payloads[row["message_id"]] = rows[0][1].get("p", "")
    held = dict(d.held)
    for tid in d.unknown:
        if (rows := rows_of(next(rest))):
            held[tid] = rows[0]["consumer"]
    found = [DeadLetter.from_entry(rows[0][0], dict(rows[0][1]))
             for rows in (rows_of(next(rest)) for _ in d.dead_ids) if rows]
    progress = [
        progress_of(tid, m.prog.get(tid), m.prog.get(f"{tid}:log"), int(at),
                    not held.get(tid, "~").startswith("~"))
        for tid, at in m.prog_order
    ]
    progress.sort(key=lambda t: not t.running)
    events = {eid: dict(f) for eid, f in m.events if f.get("request") == ask.rid}
    return RequestView(
        now_ms=now, stats=m.stats, registered_workers=int(m.registered),
        expired_leases=int(m.expired),
        info=RequestInfo.from_hash(ask.rid, m.h) if m.h and m.h.get("state") else None,
        pending=pending_entries(m.pel, expiries, revoked) if d.leases_read else [],
        payloads=payloads, first=[(eid, f.get("p", "")) for eid, f in m.first],
        progress=progress, dead_letters=found,
        results=ResultsPage(sorted(m.results_scan[1].items(), key=lambda kv: task_order(kv[0])),
                            int(m.results_scan[0]), int(m.results_total)),
        events=sorted(events.items(), key=lambda e: sid(e[0])),
    )

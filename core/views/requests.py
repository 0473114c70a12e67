"""Requests: the history in the database, filtered and paged by (time, id), with each live
request's counters read from Redis for its progress bar; and one request in detail."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from core.console import params
from core.console.paging import Paged, db_cursor, keyset, stream_cursor
from core.console.queues import queue_from
from core.models import DeadLetter, Request
from core.queue import Queue, introspect
from core.queue.client import translated
from core.queue.errors import InvalidInput
from core.queue.keys import validate_id
from core.queue.models import STATES, TERMINAL_STATES, PendingEntry, RequestInfo

from .common import console_page, page

SORTS = ("created", "finished")
PREVIEW_TASKS = 5
TIMELINE_SCAN = 500  # events read from the stream after a request's creation, at most


@dataclass(frozen=True)
class Row:
    """A request as the list shows it: the database row, its counters live from Redis while
    Redis still has it."""

    id: str
    queue: str
    state: str
    priority: int
    tenant: str
    handler: str
    total: int
    waiting: int
    leased: int
    delayed: int
    done: int
    dead: int
    cancelled: int
    created: dt.datetime | int
    finished: dt.datetime | int | None

    @property
    def final(self) -> bool:
        return self.state in TERMINAL_STATES

    @classmethod
    def of(cls, queue: str, db: Request | None, live: RequestInfo | None) -> Row:
        if live is not None:
            return cls(live.id, queue, live.state, live.priority, live.tenant, live.handler,
                       live.total, live.waiting, live.leased, live.delayed, live.done,
                       live.dead, live.cancelled, live.created_ms, live.finished_ms)
        assert db is not None
        return cls(db.request_id, queue, db.state, db.priority, db.tenant, db.handler, db.total,
                   db.waiting, db.leased, db.delayed, db.done, db.dead, db.cancelled,
                   db.created_at, db.finished_at)


def _live(queue: Queue, ids: list[str]) -> dict[str, RequestInfo]:
    """The Redis hashes of these requests (one round trip), those Redis still has."""
    if not ids:
        return {}
    with translated("requests"):
        pipe = queue.redis.pipeline(transaction=False)
        for rid in ids:
            pipe.hgetall(queue.keys.request(rid))
        hashes = pipe.execute()
    return {rid: RequestInfo.from_hash(rid, h) for rid, h in zip(ids, hashes, strict=True) if h}


@console_page
def request_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    q = request.GET
    state = params.choice(q, "state", STATES)
    tenant = params.text(q, "tenant")
    handler = params.text(q, "handler")
    priority = params.integer(q, "priority", 0, 99)
    since, until = params.when(q, "since"), params.when(q, "until")
    sort = params.choice(q, "sort", SORTS) or "created"
    find = params.text(q, "id", 128)
    field = "finished_at" if sort == "finished" else "created_at"

    qs: QuerySet[Request] = Request.objects.filter(queue=queue.name)
    if state:
        qs = qs.filter(state=state)
    if tenant:
        qs = qs.filter(tenant=tenant)
    if handler:
        qs = qs.filter(handler=handler)
    if priority is not None:
        qs = qs.filter(priority=priority)
    if since:
        qs = qs.filter(**{f"{field}__gte": since})
    if until:
        qs = qs.filter(**{f"{field}__lt": until})
    exact: Row | None = None
    if find:
        exact = _find(queue, find)
        # A prefix: a range on the (queue, request_id) index, [find, its successor), then the
        # prefix itself (the range alone is exact in a byte-ordered collation, SQLite's and
        # PostgreSQL's "C"; under a linguistic one it could leave out ids with punctuation).
        qs = qs.filter(request_id__gte=find, request_id__startswith=find)
        upper = _successor(find)
        if upper is not None:
            qs = qs.filter(request_id__lt=upper)
    paged: Paged[Request] = keyset(qs, field, db_cursor(request))
    live = _live(queue, [r.request_id for r in paged.items if r.state not in TERMINAL_STATES])
    rows = [Row.of(queue.name, r, live.get(r.request_id)) for r in paged.items]
    if exact is not None and not any(r.id == exact.id for r in rows):
        rows.insert(0, exact)
    any_live = any(not r.final for r in rows)
    context = {
        "rows": rows, "paged": paged, "states": STATES, "sorts": SORTS,
        "filters": {"state": state or "", "tenant": tenant or "", "handler": handler or "",
                    "priority": "" if priority is None else priority, "id": find or "",
                    "since": q.get("since", ""), "until": q.get("until", ""), "sort": sort},
    }
    # Poll while something on the page can still change, or new requests can appear (page 1).
    return page(request, "core/requests.html", queue, context, nav="requests",
                live=any_live or paged.first)


def _successor(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix` (None: there is none,
    it is all U+10FFFF). Never a lone surrogate, which no database can store."""
    for i in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[i])
        if code < 0x10FFFF:
            code = 0xE000 if 0xD800 <= code + 1 <= 0xDFFF else code + 1
            return prefix[:i] + chr(code)
    return None


def _find(queue: Queue, rid: str) -> Row | None:
    """The request with exactly this id, from Redis or else the database."""
    try:
        validate_id(rid, "request id")
    except InvalidInput:
        return None  # not an id: it can still be a prefix (of nothing, then)
    live = introspect.request(queue, rid)
    db = Request.objects.filter(queue=queue.name, request_id=rid).first()
    return Row.of(queue.name, db, live) if live or db else None


@console_page
def request_detail(request: HttpRequest, queue_name: str, request_id: str) -> HttpResponse:
    queue = queue_from(request, queue_name)
    try:
        validate_id(request_id, "request id")
    except InvalidInput as exc:
        raise Http404(f"{exc}.") from None
    after = stream_cursor(request)
    live = introspect.request(queue, request_id)
    db = Request.objects.filter(queue=queue.name, request_id=request_id).first()
    if live is None and db is None:
        raise Http404(f"Queue {queue.name} has no request {request_id!r} (in Redis or in the "
                      "history).")
    row = Row.of(queue.name, db, live)
    pending: list[PendingEntry] = []
    payloads: dict[str, str] = {}
    preview: list[tuple[str, str]] = []
    if live is not None:
        pending = introspect.pending(queue, request_id, after=after or "-", count=50)
        payloads, preview = _payloads(queue, request_id, [p.task_id for p in pending])
    letters = list(
        DeadLetter.objects.filter(queue=queue.name, request_id=request_id).order_by("-dead_at")[:20]
    )
    next_after = pending[-1].task_id if len(pending) == 50 else None
    context = {
        "row": row, "info": live, "db": db, "pending": pending, "payloads": payloads,
        "preview": preview, "letters": letters, "timeline": _timeline(queue, row, db),
        "next_after": next_after, "first_page": after is None,
        "lease_now_ms": queue.now_ms() if pending else 0,
        # Leased to a worker (not parked): what release and claim can act on.
        "claimable": any(not p.consumer.startswith("~") for p in pending),
    }
    return page(request, "core/request.html", queue, context, nav="requests",
                live=not row.final)


def _payloads(
    queue: Queue, rid: str, task_ids: list[str]
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The payloads of these tasks, and of the request's first tasks (one round trip)."""
    stream = queue.keys.tasks(rid)
    r: Any = queue.redis
    with translated("payloads"):
        pipe = r.pipeline(transaction=False)
        for tid in task_ids:
            pipe.xrange(stream, tid, tid, count=1)
        pipe.xrange(stream, "-", "+", count=PREVIEW_TASKS)
        got = pipe.execute()
    payloads = {tid: rows[0][1].get("p", "") for tid, rows in zip(task_ids, got, strict=False)
                if rows}
    preview = [(eid, fields.get("p", "")) for eid, fields in got[-1]]
    return payloads, preview


@dataclass(frozen=True)
class Event:
    at: int | dt.datetime
    kind: str
    detail: str


def _timeline(queue: Queue, row: Row, db: Request | None) -> list[Event]:
    """What happened to the request: its events still in the queue's capped `events` stream
    (read from its creation on, TIMELINE_SCAN entries at most), and what the database row
    recorded (creation, completions) where the stream has lost them."""
    created = row.created
    created_ms = created if isinstance(created, int) else int(created.timestamp() * 1000)
    r: Any = queue.redis
    with translated("timeline"):
        rows = r.xrange(queue.keys.events, max(0, created_ms - 1), "+", count=TIMELINE_SCAN)
    events = []
    for eid, f in rows:
        if f.get("request") != row.id:
            continue
        # Not the first tasks' ids and payload text that the search index takes from the event.
        detail = ", ".join(f"{k} {v}" for k, v in f.items()
                           if k not in ("type", "request", "ids", "text"))
        events.append(Event(int(eid.split("-")[0]), f.get("type", "?"), detail))
    kinds = {e.kind for e in events}
    if "submitted" not in kinds:
        events.insert(0, Event(row.created, "submitted", "(from the history)"))
    if db is not None and db.finished_at and "completed" not in kinds:
        events.append(Event(db.finished_at, "completed",
                            f"state {db.state}, completions {db.completions} (from the history)"))
    return events

"""Requests: the history in the database, filtered and paged by (time, id), with each live
request's counters read from Redis for its progress bar; and one request in detail."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse

from core.console import params
from core.console.paging import Paged, db_cursor, keyset, stream_cursor, successor
from core.console.params import BadParam
from core.console.queues import queue_from
from core.models import DeadLetter, Request
from core.queue import Queue, introspect
from core.queue.errors import InvalidInput
from core.queue.introspect import MAX_RESULTS_CURSOR
from core.queue.keys import validate_id, validate_task_id
from core.queue.models import (
    STATES,
    TERMINAL_STATES,
    PendingEntry,
    RequestInfo,
    TaskProgress,
)

from .common import console_page, page

SORTS = ("created", "finished")
PREVIEW_TASKS = 5
RESULTS_PAGE = 50  # results shown at once (about: a page of the request's results hash)
RESULT_PREVIEW = 200  # characters of a result shown in the table; the rest on its own page
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
    return introspect.requests_many(queue, ids)


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
        upper = successor(find)
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
    progress: list[TaskProgress] = []
    if live is not None:
        pending = introspect.pending(queue, request_id, after=after or "-", count=50)
        payloads, preview = _payloads(queue, request_id, [p.task_id for p in pending])
        # Running tasks first, then those that finished (or wait to run again), newest first.
        progress = sorted(introspect.progress(queue, request_id), key=lambda t: not t.running)
    letters = list(
        DeadLetter.objects.filter(queue=queue.name, request_id=request_id).order_by("-dead_at")[:20]
    )
    next_after = pending[-1].task_id if len(pending) == 50 else None
    # A held follow-up waits on its parent: the page says which, and whether it failed.
    parent = (introspect.request(queue, live.after)
              if live is not None and live.state == "held" and live.after else None)
    results_at = _results_cursor(request)
    results = None
    if live is not None:
        page_ = introspect.results(queue, request_id, cursor=results_at, count=RESULTS_PAGE)
        results = {"rows": [_result_row(queue.name, request_id, tid, text)
                            for tid, text in page_.items],
                   "total": page_.total, "next": page_.cursor, "first": results_at == 0}
    context = {
        "row": row, "info": live, "db": db, "parent": parent, "pending": pending,
        "payloads": payloads,
        "progress": progress,
        "preview": preview, "letters": letters, "timeline": _timeline(queue, row, db),
        "next_after": next_after, "first_page": after is None, "results": results,
        "lease_now_ms": queue.now_ms() if pending else 0,
        # Leased to a worker (not parked): what release and claim can act on.
        "claimable": any(not p.consumer.startswith("~") for p in pending),
    }
    return page(request, "core/request.html", queue, context, nav="requests",
                live=not row.final)


def _results_cursor(request: HttpRequest) -> int:
    """Where the page of results starts: ?results=<cursor> (0: the first page)."""
    raw = request.GET.get("results", "").strip()
    if not raw:
        return 0
    if not (raw.isdecimal() and raw.isascii() and len(raw) <= 20
            and int(raw) <= MAX_RESULTS_CURSOR):
        raise BadParam(f"results must be a page cursor (a whole number), not {raw[:100]!r}. "
                       "Start again from the first page of results.")
    return int(raw)


@dataclass(frozen=True)
class ResultRow:
    """A task's result as the request page shows it: one line, cut, escaped by the template."""

    task_id: str
    preview: str
    cut: bool
    size: int
    url: str


def _result_row(queue: str, rid: str, tid: str, text: str) -> ResultRow:
    try:
        compact = json.dumps(json.loads(text), ensure_ascii=False, separators=(", ", ": "))
    except ValueError:  # not written by the engine's client: shown as it is
        compact = text
    return ResultRow(tid, compact[:RESULT_PREVIEW], len(compact) > RESULT_PREVIEW,
                     len(text.encode()), reverse("core:result", args=[queue, rid, tid]))


@console_page
def result_detail(
    request: HttpRequest, queue_name: str, request_id: str, task_id: str
) -> HttpResponse:
    """One task's result, whole: pretty-printed on a page, or as it is kept (?format=json)."""
    queue = queue_from(request, queue_name)
    try:
        validate_id(request_id, "request id")
        validate_task_id(task_id)
    except InvalidInput as exc:
        raise Http404(f"{exc}.") from None
    text = introspect.result_text(queue, request_id, task_id)
    if text is None:
        raise Http404(f"Task {task_id} of request {request_id} in queue {queue.name} has no "
                      "result: it returned none, has not finished, or the request's retention "
                      "ended.")
    if params.choice(request.GET, "format", ("json",)) == "json":
        response = HttpResponse(text, content_type="application/json")
        response["Content-Disposition"] = f'inline; filename="{request_id}-{task_id}.json"'
        return response
    try:
        pretty = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        pretty = text
    context = {"request_id": request_id, "task_id": task_id, "pretty": pretty,
               "size": len(text.encode())}
    return page(request, "core/result.html", queue, context, nav="requests", live=False)


def _payloads(
    queue: Queue, rid: str, task_ids: list[str]
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The payloads of these tasks, and of the request's first tasks (one round trip)."""
    return (introspect.task_payloads(queue, rid, task_ids),
            introspect.first_payloads(queue, rid, PREVIEW_TASKS))


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
    rows = introspect.events_since(queue, created_ms - 1, count=TIMELINE_SCAN)
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

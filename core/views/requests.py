"""Requests: the history in the database, filtered and paged by (time, id), with each live
request's counters read from Redis for its progress bar; and one request in detail."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, replace

from django.conf import settings
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse

from core.console import params, timeline
from core.console.aggregates import LIVE_WORKER_MS, QueueSummary
from core.console.paging import Paged, db_cursor, keyset, stream_cursor, successor
from core.console.params import BadParam
from core.console.queues import queue_from
from core.models import DeadLetter, Request, RequestEvent
from core.queue import Queue, read
from core.queue.errors import InvalidInput
from core.queue.follow import sid
from core.queue.keys import validate_id, validate_task_id
from core.queue.models import STATES, TERMINAL_STATES, RequestInfo, TaskProgress
from core.queue.models import DeadLetter as EngineDeadLetter
from core.queue.read import MAX_RESULTS_CURSOR
from core.queue.tracehook import trace_id_of

from .common import console_page, page

SORTS = ("created", "finished")
PREVIEW_TASKS = 5
PENDING_PAGE = 50
LETTERS_SHOWN = 20
RESULTS_PAGE = 50  # results shown at once (about: a page of the request's results hash)
RESULT_PREVIEW = 200  # characters of a result shown in the table; the rest on its own page
# Entries of the queue's `events` stream read for the events the history does not have yet
# (the newest), or for a request whose history has none (from its creation on).
TIMELINE_SCAN = 500
# A cancel applies while the request can still run tasks (not while it is being cancelled).
CANCELLABLE = ("open", "scheduled", "held", "active")


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
    # What its running tasks report of themselves (ctx.progress): its bar counts it.
    tasks: tuple[TaskProgress, ...] = ()

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
    return read.requests_many(queue, ids)


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
    running = read.running_progress(queue, [rid for rid, i in live.items() if i.leased])
    rows = [replace(Row.of(queue.name, r, live.get(r.request_id)),
                    tasks=tuple(running.get(r.request_id, ())))
            for r in paged.items]
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
    live = read.request(queue, rid)
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
    results_at = _results_cursor(request)
    db = Request.objects.filter(queue=queue.name, request_id=request_id).first()
    kept = timeline.stored(queue.name, request_id)
    # Everything below the navigation, the queue's strip included, comes from this one read.
    view = read.request_view(
        queue, request_id, pending_after=after or "-", pending_count=PENDING_PAGE,
        first_tasks=PREVIEW_TASKS, results_cursor=results_at, results_count=RESULTS_PAGE,
        letters=LETTERS_SHOWN, events_after=kept[-1].entry_id if kept else None,
        events_since_ms=(int(db.created_at.timestamp() * 1000) - 1
                         if db is not None and not kept else None),
        events_count=TIMELINE_SCAN, worker_timeout_ms=LIVE_WORKER_MS,
    )
    live = view.info
    if live is None and db is None:
        raise Http404(f"Queue {queue.name} has no request {request_id!r} (in Redis or in the "
                      "history).")
    row = Row.of(queue.name, db, live)
    if live is not None:
        letters = [Letter.of_entry(d) for d in view.dead_letters]
    else:  # the history's, those not requeued or deleted
        letters = [Letter.of_row(d) for d in DeadLetter.still_dead(
            queue.name, request_id=request_id).order_by("-dead_at")[:LETTERS_SHOWN]]
    pending = view.pending if live is not None else []
    next_after = pending[-1].task_id if len(pending) == PENDING_PAGE else None
    # A held follow-up waits on its parent: the page says which, and whether it failed.
    parent = (read.request(queue, live.after)
              if live is not None and live.state == "held" and live.after else None)
    results = None
    if live is not None:
        results = {"rows": [_result_row(queue.name, request_id, tid, text)
                            for tid, text in view.results.items],
                   "total": view.results.total, "next": view.results.cursor,
                   "first": results_at == 0}
    context = {
        "row": row, "info": live, "db": db, "parent": parent, "pending": pending,
        "payloads": view.payloads,
        "progress": view.progress if live is not None else [],
        "preview": view.first if live is not None else [],
        "letters": letters,
        "letters_unlisted": max(0, row.dead - len(letters)) if live is not None else 0,
        "timeline": timeline.build(kept, view.events, db, row.created),
        "next_after": next_after, "first_page": after is None, "results": results,
        "lease_now_ms": view.now_ms,
        # Leased to a worker (not parked): what release and claim can act on.
        "claimable": any(not p.consumer.startswith("~") for p in pending),
        "actions": Actions.of(row, live, letters),
        "trace": Trace.of(live, kept),
        "summary": QueueSummary(queue.name, view.stats, view.now_ms, view.registered_workers,
                                view.expired_leases, None),
    }
    return page(request, "core/request.html", queue, context, nav="requests",
                live=not row.final)


@dataclass(frozen=True)
class Trace:
    """The trace id of the producer's context kept with the request (issue 38), and its page
    in the tracing UI when one is configured (settings.TRACING_UI_URL)."""

    id: str
    url: str

    @classmethod
    def of(cls, live: RequestInfo | None, kept: list[RequestEvent]) -> Trace | None:
        tp = live.traceparent if live is not None else ""
        if not tp:  # gone from Redis: its submitted event, as the history keeps it
            for e in kept:
                if e.kind == "submitted" and '"tp"' in e.detail:
                    tp = str(json.loads(e.detail).get("tp", ""))
                    break
        trace_id = trace_id_of(tp)
        if not trace_id:
            return None
        ui = settings.TRACING_UI_URL
        return cls(trace_id, ui.replace("{trace_id}", trace_id) if ui else "")


@dataclass(frozen=True)
class Actions:
    """Which of the request's actions apply now (the page offers only those): cancel while it
    can still run tasks, requeue while it has dead letters and is not cancelled, delete while
    it has dead letters."""

    cancel: bool
    requeue: bool
    delete: bool

    @property
    def any(self) -> bool:
        return self.cancel or self.requeue or self.delete

    @classmethod
    def of(cls, row: Row, live: RequestInfo | None, letters: list[Letter]) -> Actions:
        if live is None:  # Redis no longer holds it: only its letters can still go
            return cls(False, False, bool(letters))
        return cls(cancel=live.state in CANCELLABLE,
                   requeue=live.dead > 0 and live.state not in ("cancelling", "cancelled"),
                   delete=live.dead > 0)


@dataclass(frozen=True)
class Letter:
    """One dead letter of the request as its page lists it."""

    entry_id: str
    task_id: str
    error: str
    attempts: int
    worker: str
    at: int | dt.datetime

    @classmethod
    def of_entry(cls, d: EngineDeadLetter) -> Letter:
        return cls(d.id, d.task_id, d.error, d.attempts, d.worker, d.ts_ms or sid(d.id)[0])

    @classmethod
    def of_row(cls, d: DeadLetter) -> Letter:
        return cls(d.entry_id, d.task_id, d.error, d.attempts, d.worker, d.dead_at)


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
    text = read.result_text(queue, request_id, task_id)
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

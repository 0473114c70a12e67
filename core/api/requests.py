"""A queue's requests: submit; read one (and wait for it), its tasks, results and events;
cancel, requeue its dead letters, run a delayed one now."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest
from ninja import Router, Status
from ninja.params.functions import Query

from core import tracing
from core.conf import get_queue
from core.models import Request, RequestEvent
from core.ops import actions, tokens
from core.ops.submit import Submit, submit
from core.queue import Queue, read
from core.queue.keys import MAX_TASK_ID, validate_task_id
from core.queue.models import RequestInfo

from .common import actor, known_queue, outcome, reader, valid_id
from .schemas import (
    ActionOut,
    EventOut,
    Invalid,
    Message,
    RequestOut,
    ResultsOut,
    SubmitIn,
    SubmitOut,
    TaskOut,
    TasksOut,
)

router = Router(tags=["requests"])
REFUSALS: dict[int, Any] = {400: Invalid, 401: Message, 403: Message, 404: Message,
                            409: Message, 429: Message, 503: Message}
BASE = "/queues/{queue}/requests"


@router.post(BASE, response={201: SubmitOut, **REFUSALS}, summary="Submit a request")
def submit_request(request: HttpRequest, queue: str, body: SubmitIn) -> Any:
    """One request of `tasks`, run by the handler `handler` (which a live worker of the queue
    must have announced, unless `any_handler`); delayed with `delay_s` or `run_at`. Needs the
    operate scope. Idempotent on `request_id`: a second submit returns the first
    (`created` false). A W3C `traceparent` header is the producer's trace context, kept with
    the request (docs/tracing.md); an invalid one is ignored."""
    ask = Submit(tasks=body.tasks, handler=body.handler, request_id=body.request_id,
                 priority=body.priority, concurrency=body.concurrency, tenant=body.tenant,
                 max_attempts=body.max_attempts, lease_ms=body.lease_ms,
                 retention_ms=body.retention_ms, delay_s=body.delay_s, run_at=body.run_at,
                 any_handler=body.any_handler)
    with tracing.incoming(request.headers.get("traceparent")) as tp:
        sub = submit(actor(request), queue, replace(ask, traceparent=tp))
    return Status(201, {"request_id": sub.request_id, "created": sub.created,
                        "state": sub.state, "total": sub.total, "due_ms": sub.due_ms})


def _info(q: Queue, rid: str) -> RequestInfo:
    info = read.request(q, rid)
    if info is None:
        raise Http404(f"there is no request {rid!r} in queue {q.name!r} (never submitted, "
                      "or past its retention)")
    return info


def request_out(q: Queue, info: RequestInfo) -> dict[str, Any]:
    return {
        "id": info.id, "queue": q.name, "state": info.state, "finished": info.finished,
        "priority": info.priority, "concurrency": info.concurrency, "tenant": info.tenant,
        "handler": info.handler, "total": info.total, "waiting": info.waiting,
        "leased": info.leased, "delayed": info.delayed, "done": info.done, "dead": info.dead,
        "cancelled": info.cancelled, "discarded": info.discarded,
        "max_attempts": info.max_attempts, "created_ms": info.created_ms,
        "updated_ms": info.updated_ms, "finished_ms": info.finished_ms, "due_ms": info.due_ms,
        "after": info.after, "then": list(info.then), "traceparent": info.traceparent,
    }


@router.get(BASE + "/{request_id}", response={200: RequestOut, **REFUSALS},
            summary="A request's state and counts (or wait for it to finish)")
def get_request(request: HttpRequest, queue: str, request_id: str,
                wait: float = Query(0, ge=0, le=3600, description=(
                    "seconds to wait for it to finish (at most QA_API_WAIT_MAX_S, 20 by "
                    "default); it answers as soon as it finishes"))) -> Any:
    """The request as it is; with `wait`, as soon as it finishes, or when the time runs out
    (then `finished` is false)."""
    reader(request)
    q = known_queue(queue)
    rid = valid_id(request_id, "request id")
    info = _info(q, rid)
    if wait > 0 and not info.finished:
        with _waiting():
            q.wait(rid, timeout=min(float(wait), float(settings.API_WAIT_MAX_S)))
        info = _info(q, rid)
    return request_out(q, info)


_waiters: dict[int, threading.BoundedSemaphore] = {}  # by QA_API_WAITERS
_waiters_lock = threading.Lock()


@contextlib.contextmanager
def _waiting() -> Iterator[None]:
    """A place among the waits this process holds (QA_API_WAITERS), or a 429: each holds a
    server thread, and eight waits took every thread of the stack's console (its pages and
    every other call stood still until they ended)."""
    n = settings.API_WAITERS
    with _waiters_lock:
        slots = _waiters.get(n) or _waiters.setdefault(n, threading.BoundedSemaphore(n))
    if not slots.acquire(blocking=False):
        raise tokens.RateLimited(
            f"{settings.API_WAITERS} calls are waiting on this server already: ask again "
            "without ?wait=, or wait after Retry-After", retry_after=1)
    try:
        yield
    finally:
        slots.release()


@router.get(BASE + "/{request_id}/tasks", response={200: TasksOut, **REFUSALS},
            summary="A request's pending tasks (leased, waiting after a retry, delayed, dead)")
def get_tasks(request: HttpRequest, queue: str, request_id: str,
              after: str = Query("-", max_length=40), count: int = Query(50, ge=1, le=1000)
              ) -> Any:
    reader(request)
    q = known_queue(queue)
    rid = valid_id(request_id, "request id")
    _info(q, rid)
    if after != "-":
        valid_task(after)
    rows = read.pending(q, rid, after=after, count=count)
    tasks = [TaskOut(task_id=e.task_id, consumer=e.consumer, idle_ms=e.idle_ms,
                     deliveries=e.deliveries, lease_expires_ms=e.lease_expires_ms,
                     moves_by_ms=e.moves_by_ms) for e in rows]
    last = rows[-1].task_id if len(rows) == count and rows[-1].task_id != MAX_TASK_ID else None
    return {"tasks": tasks, "next": last}


def valid_task(value: str) -> str:
    from core.ops.errors import BadInput
    from core.queue import InvalidInput

    try:
        return validate_task_id(value)
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None


@router.get(BASE + "/{request_id}/results", response={200: ResultsOut, **REFUSALS},
            summary="A request's tasks' results, by task id, a page at a time")
def get_results(request: HttpRequest, queue: str, request_id: str,
                cursor: int = Query(0, ge=0, le=read.MAX_RESULTS_CURSOR),
                count: int = Query(50, ge=1, le=1000)) -> Any:
    reader(request)
    q = known_queue(queue)
    rid = valid_id(request_id, "request id")
    _info(q, rid)
    page = read.results(q, rid, cursor=cursor, count=count)
    return {"results": {tid: json.loads(text) for tid, text in page.items},
            "cursor": page.cursor, "total": page.total}


@router.get(BASE + "/{request_id}/events", response={200: list[EventOut], **REFUSALS},
            summary="A request's events, oldest first, as the database's history keeps them")
def get_events(request: HttpRequest, queue: str, request_id: str,
               count: int = Query(500, ge=1, le=5000)) -> Any:
    reader(request)
    valid_id(queue, "queue name")
    rid = valid_id(request_id, "request id")
    rows = list(RequestEvent.objects.filter(queue=queue, request_id=rid)
                .order_by("at_ms", "id")[:count])
    if not rows and not Request.objects.filter(queue=queue, request_id=rid).exists():
        _info(get_queue(queue), rid)  # not in the history yet: 404 unless Redis has it
    out = []
    for e in rows:
        try:
            detail = json.loads(e.detail) if e.detail else {}
        except ValueError:
            detail = {"text": e.detail}
        out.append({"at_ms": e.at_ms, "kind": e.kind, "task_id": e.task_id,
                    "detail": detail if isinstance(detail, dict) else {"value": detail}})
    return out


@router.post(BASE + "/{request_id}/cancel", response={200: ActionOut, **REFUSALS},
             summary="Cancel a request (operate)")
def cancel_request(request: HttpRequest, queue: str, request_id: str) -> Any:
    """No more of its tasks are delivered; running ones are told to stop. A request finished
    already is skipped (acted 0); one the queue does not know (or no longer) is a 404."""
    _known(queue, request_id)
    return outcome(actions.cancel(actor(request), queue, [request_id]))


@router.post(BASE + "/{request_id}/requeue", response={200: ActionOut, **REFUSALS},
             summary="Requeue every dead letter of a request (operate)")
def requeue_request(request: HttpRequest, queue: str, request_id: str) -> Any:
    return outcome(actions.requeue_request(actor(request), queue, request_id))


@router.post(BASE + "/{request_id}/run-now", response={200: ActionOut, **REFUSALS},
             summary="Make a delayed request due now (operate)")
def run_now(request: HttpRequest, queue: str, request_id: str) -> Any:
    _known(queue, request_id)
    return outcome(actions.run_now(actor(request), queue, [request_id]))


def _known(queue: str, request_id: str) -> None:
    """404 unless the queue holds the request: the actions' own replies count an unknown id
    as skipped, which reads as if it were there ("cancelled 0 of 1")."""
    _info(known_queue(queue), valid_id(request_id, "request id"))

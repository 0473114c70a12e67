"""A request's submit as an actor's action (the HTTP API's; issue 38): the permission
(core.submit_request), the input checked (the handler a worker of the queue announced, unless
`any_handler`), the engine's submit, and one audit entry ("submit")."""

from __future__ import annotations

import datetime as dt
import warnings
from dataclasses import dataclass
from typing import Any

from core.conf import get_queue
from core.queue import InvalidInput, PayloadTooLarge, QueueError, handlers
from core.queue.errors import UnknownHandlerWarning
from core.queue.keys import validate_id
from core.queue.models import Submitted

from . import audit
from .audit import as_actor
from .errors import BadInput, Refused

PERMISSION = "core.submit_request"
MAX_TASKS = 10_000  # one call into the engine


@dataclass(frozen=True)
class Submit:
    """What a submit asks for; None leaves the engine's default."""

    tasks: list[Any]
    handler: str
    request_id: str | None = None
    priority: int | None = None
    concurrency: int | None = None
    tenant: str | None = None
    max_attempts: int | None = None
    lease_ms: int | None = None
    retention_ms: int | None = None
    delay_s: float | None = None
    run_at: dt.datetime | None = None
    any_handler: bool = False
    # The producer's W3C trace context to keep with the request (issue 38): None = the
    # submit's own send span's while tracing is on, else none.
    traceparent: str | None = None


def submit(who: Any, queue: str, ask: Submit) -> Submitted:
    """The request submitted into `queue` (a new queue name is a new queue, as for a
    producer); Refused, BadInput, or the engine's QueueError (Redis down) after auditing."""
    actor = as_actor(who)
    count = len(ask.tasks) if isinstance(ask.tasks, list) else 0
    target = f"request {ask.request_id or '(new)'} of {count:,} tasks, handler {ask.handler}"
    if not audit.may(actor, PERMISSION):
        audit.record(actor, "submit", queue[:200], target=target, count=count, refused=True,
                     error=f"{actor.name} lacks the permission {PERMISSION}")
        raise Refused(f"{actor.name} may not submit: it needs the permission {PERMISSION} "
                      "(the refusal was recorded)")
    q = _checked(queue, ask)
    options = {k: v for k, v in (
        ("priority", ask.priority), ("concurrency", ask.concurrency), ("tenant", ask.tenant),
        ("max_attempts", ask.max_attempts), ("lease_ms", ask.lease_ms),
        ("retention_ms", ask.retention_ms)) if v is not None}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnknownHandlerWarning)  # checked already
            sub = q.submit(ask.tasks, handler=ask.handler, request_id=ask.request_id,
                           run_at=ask.run_at, delay=ask.delay_s, traceparent=ask.traceparent,
                           **options)
    except PayloadTooLarge as exc:
        raise BadInput(f"task {exc.index}: {exc.size} bytes; a task may hold at most "
                       f"{q.max_payload_bytes}. Put the data somewhere shared and submit a "
                       "reference") from None
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None
    except QueueError as exc:
        audit.record(actor, "submit", queue, target=target, count=count, error=str(exc))
        raise
    audit.record(actor, "submit", queue, target=f"request {sub.request_id} of {sub.total:,} "
                 f"tasks, handler {ask.handler}", count=count, acted=int(sub.created),
                 skipped=int(not sub.created))
    return sub


def _checked(queue: str, ask: Submit) -> Any:
    try:
        validate_id(queue, "queue name")
        if ask.request_id is not None:
            validate_id(ask.request_id, "request id")
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None
    if not ask.tasks:
        raise BadInput("nothing to submit: give at least one task")
    if len(ask.tasks) > MAX_TASKS:
        raise BadInput(f"{len(ask.tasks):,} tasks: at most {MAX_TASKS:,} in one submit")
    if ask.run_at is not None and ask.delay_s is not None:
        raise BadInput("give run_at or delay_s, not both")
    q = get_queue(queue)
    if not ask.any_handler:
        offered = handlers.known(q)
        if ask.handler not in offered:
            known = (f"its workers run: {', '.join(offered)}" if offered else
                     "no worker of it has announced any handler yet (is one running?)")
            raise BadInput(f"no worker of queue {queue} runs handler {ask.handler!r}; {known}. "
                           "Start a worker that registers it, or send \"any_handler\": true "
                           "to submit anyway (the tasks wait until such a worker starts)")
    return q

"""What the API's endpoints share: the caller (the token's actor), a queue named in a path, the
read check, and an ops Result as JSON."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.conf import settings
from django.http import Http404, HttpRequest

from core.conf import DEFAULT_QUEUE, get_queue, redis_client
from core.ops import audit
from core.ops.actions import Result
from core.ops.audit import Actor
from core.ops.errors import BadInput, Refused
from core.queue import InvalidInput, Queue, read
from core.queue.keys import validate_id

READ = "core.view_console"


def actor(request: HttpRequest) -> Actor:
    """The token's actor, which the auth put on the request."""
    who = getattr(request, "auth", None)
    if not isinstance(who, Actor):  # the auth runs before every endpoint that calls this
        raise Refused("no token")
    return who


def reader(request: HttpRequest) -> Actor:
    """The caller, if it may read (core.view_console: every scope passes it); else Refused."""
    who = actor(request)
    if not audit.may(who, READ):
        raise Refused(f"{who.name} may not read the console's data: its user needs the "
                      f"permission {READ}")
    return who


def valid_id(value: str, what: str) -> str:
    try:
        return validate_id(value, what)
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None


def known_queue(name: str) -> Queue:
    """The queue `name` if a producer or worker has used it (or it is the default); 404 if
    it names none, BadInput if it is not a valid name."""
    valid_id(name, "queue name")
    if name != DEFAULT_QUEUE and name not in read.queues(redis_client(),
                                                          prefix=settings.QUEUE_PREFIX):
        raise Http404(f"there is no queue named {name!r}")
    return get_queue(name)


def outcome(result: Result) -> dict[str, Any]:
    return {"action": result.action, "acted": result.acted, "skipped": result.skipped,
            "message": result.message, "audit_id": result.audit_id,
            "notes": list(result.notes)}


def refuse_nul(request: HttpRequest) -> None:
    """BadInput if the path, a query parameter or a string of the JSON body holds a NUL
    character: PostgreSQL refuses one in any text (a filter, an audit entry's target), and
    no id, name or filter of the API may hold one (the console's forms refuse it alike)."""
    if "\x00" in request.path or any("\x00" in k or "\x00" in v
                                     for k, vs in request.GET.lists() for v in [k, *vs]):
        raise BadInput("the address holds a NUL character (U+0000), which no parameter may")
    body = request.body
    if b"\x00" in body or (b"\\u0000" in body and _holds_nul(_json(body))):
        raise BadInput("the body holds a NUL character (U+0000), which no field may")


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None  # not JSON: the endpoint's own parsing says so


def _holds_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_holds_nul(v) for v in value)
    return False


def utc(value: dt.datetime | None, name: str) -> dt.datetime | None:
    """A time as the database takes it: in UTC (a time without an offset is UTC); BadInput for
    one that leaves the calendar there (year 1 with a positive offset)."""
    if value is None:
        return None
    try:
        return (value.astimezone(dt.UTC) if value.tzinfo is not None
                else value.replace(tzinfo=dt.UTC))
    except (OverflowError, ValueError):
        raise BadInput(f"{name} is outside the years 1 to 9999 in UTC") from None

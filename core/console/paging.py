"""The one pagination helper: forward pages by cursor, never by offset.

Three kinds of cursor, all in the `after` query parameter:
- a Redis sorted set's (score, member) (`PageCursor`: requests by state, workers, leases),
- a Redis stream id (a request's pending entries),
- a database keyset (time, primary key) (`keyset()`): request history, dead letters.
A malformed cursor is a 400 (BadParam), never a 500.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db.models import Model, QuerySet
from django.http import HttpRequest

from core.queue.errors import InvalidInput
from core.queue.keys import validate_id, validate_task_id
from core.queue.models import PageCursor

from .params import BadParam

T = TypeVar("T")
M = TypeVar("M", bound=Model)
PAGE_SIZE = 50
CURSOR = "after"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
MICRO = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class Paged(Generic[T]):
    """One page of rows; `next` is the cursor of the next page (None on the last), `first`
    whether this is the first page."""

    items: Sequence[T]
    next: str | None
    first: bool


def raw_cursor(request: HttpRequest) -> str | None:
    value = request.GET.get(CURSOR, "").strip()
    if len(value) > 300:
        raise BadParam("The page cursor is too long.")
    return value or None


def zset_cursor(request: HttpRequest) -> PageCursor | None:
    """A (score, member) cursor: "<score>:<id>"."""
    raw = raw_cursor(request)
    try:
        return PageCursor.parse(raw) if raw else None
    except InvalidInput as exc:
        raise BadParam(f"Bad page cursor: {exc}. Start again from the first page.") from None


def lease_cursor(request: HttpRequest) -> PageCursor | None:
    """A (score, lease token) cursor: "<expiry ms>:<request>/<task>/<delivery>"."""
    raw = raw_cursor(request)
    if raw is None:
        return None
    score, _, token = raw.partition(":")
    rid, _, rest = token.partition("/")
    tid, _, delivery = rest.partition("/")
    try:
        if not (score.isdecimal() and len(score) <= 20 and delivery.isdecimal()):
            raise InvalidInput(f"expected <expiry>:<request>/<task>/<delivery>, got {raw!r}")
        validate_id(rid, "request id")
        validate_task_id(tid)
    except InvalidInput as exc:
        raise BadParam(f"Bad page cursor: {exc}. Start again from the first page.") from None
    return PageCursor(int(score), token)


def stream_cursor(request: HttpRequest) -> str | None:
    """A stream entry id: "<ms>-<seq>"."""
    raw = raw_cursor(request)
    try:
        return validate_task_id(raw) if raw else None
    except InvalidInput as exc:
        raise BadParam(f"Bad page cursor: {exc}. Start again from the first page.") from None


def db_cursor(request: HttpRequest) -> tuple[dt.datetime, int] | None:
    """A keyset cursor: "<microseconds since the epoch>:<primary key>"."""
    raw = raw_cursor(request)
    if raw is None:
        return None
    micros, sep, pk = raw.partition(":")
    if not (sep and micros.isdecimal() and pk.isdecimal() and len(micros) <= 17
            and len(pk) <= 19):
        raise BadParam(f"Bad page cursor {raw!r}: expected <time>:<id>. "
                       "Start again from the first page.")
    try:
        at = EPOCH + int(micros) * MICRO
    except (OverflowError, ValueError, OSError):
        raise BadParam(f"Bad page cursor {raw!r}: time out of range.") from None
    return at, int(pk)


def keyset(
    qs: QuerySet[M], field: str, after: tuple[dt.datetime, int] | None, limit: int = PAGE_SIZE
) -> Paged[M]:
    """Rows of `qs` newest first by (`field`, pk), after the cursor: a range on an index that
    ends with `field`, so a deep page costs what the first does."""
    qs = qs.filter(**{f"{field}__isnull": False}).order_by(f"-{field}", "-pk")
    if after is not None:
        at, pk = after
        qs = qs.filter(**{f"{field}__lte": at}).exclude(**{field: at, "pk__gte": pk})
    rows = list(qs[: limit + 1])
    nxt = None
    if len(rows) > limit:
        last: Any = rows[limit - 1]
        stamp: dt.datetime = getattr(last, field)
        nxt = f"{(stamp - EPOCH) // MICRO}:{last.pk}"
    return Paged(rows[:limit], nxt, after is None)


def successor(prefix: str) -> str | None:
    """The least string above every string that starts with `prefix` (None: there is none),
    so that a prefix search is the index range [prefix, successor). Never a lone surrogate,
    which no database can store."""
    for i in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[i])
        if code < 0x10FFFF:
            code = 0xE000 if 0xD800 <= code + 1 <= 0xDFFF else code + 1
            return prefix[:i] + chr(code)
    return None

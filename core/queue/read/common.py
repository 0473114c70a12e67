"""What every read of the engine shares: the client, the limits of a read, and the shapes of
the replies it parses (a Redis Cluster client's transaction leaves some of them unparsed)."""

from __future__ import annotations

import json
from typing import Any

import redis

from ..base import QueueBase

MAX_PAGE = 1000  # rows per page
PIPELINE_CHUNK = 500  # commands per pipelined round trip of the bulk reads


def redis_of(q: QueueBase) -> Any:
    """The queue's client, untyped: redis-py types replies as bytes | str whatever the
    connection decodes; ours always decodes to str."""
    return q.redis


def json_of(text: str | None, kind: type) -> Any:
    """`text` as JSON if it holds a `kind` (dict, list), else None."""
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, kind) else None


def rows_of(reply: Any) -> list[Any]:
    """A detail read's rows; none when it failed (its stream gone meanwhile)."""
    return reply if isinstance(reply, list) else []


def sid(entry_id: str) -> tuple[int, int]:
    """A stream entry id as a sortable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def raised(replies: list[Any]) -> list[Any]:
    """The replies of a transaction read with raise_on_error=False, raising the first error."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """An XRANGE (XREVRANGE) reply as (id, fields), parsed or raw ([id, [field, value...]])."""
    return [(eid, f if isinstance(f, dict) else dict(zip(f[::2], f[1::2], strict=True)))
            for eid, f in reply or []]


def pel_row(row: Any) -> dict[str, Any]:
    """An XPENDING row as redis-py parses it, from its parsed or raw form."""
    if isinstance(row, dict):
        return row
    tid, consumer, idle, deliveries = row
    return {"message_id": tid, "consumer": consumer, "time_since_delivered": int(idle),
            "times_delivered": int(deliveries)}


def scanned(reply: Any) -> tuple[int, dict[str, str]]:
    """An HSCAN reply as (cursor, fields), parsed or raw ([cursor, [field, value...]])."""
    cursor, found = reply
    if not isinstance(found, dict):
        found = dict(zip(found[::2], found[1::2], strict=True))
    return int(cursor), found


def no_group(reply: Any) -> list[dict[str, Any]]:
    """An XPENDING reply: a finished request's stream (and group) is gone: nothing pending."""
    if isinstance(reply, redis.ResponseError) and "NOGROUP" in str(reply):
        return []
    if isinstance(reply, Exception):
        raise reply
    return reply if isinstance(reply, list) else []

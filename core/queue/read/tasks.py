"""A request's tasks: its pending entries (leased or parked, with their lease expiries) and
its tasks' payloads."""

from __future__ import annotations

from typing import Any

import redis

from ..base import QueueBase, int_in, translated
from ..keys import GROUP, MAX_TASK_ID, validate_id, validate_task_id
from ..models import PendingEntry
from .common import MAX_PAGE, redis_of


def pending(
    q: QueueBase, request_id: str, *, after: str = "-", count: int = 50
) -> list[PendingEntry]:
    """A page of a request's pending entries: leased tasks with their lease expiry (or, for
    one an operator released or claimed while its holder may still run it, when it moves on
    at the latest), and parked ones (consumer "~waiting", "~delayed" or "~dead")."""
    rid = validate_id(request_id, "request id")
    start = after if after == "-" else f"({validate_task_id(after)}"
    if after == MAX_TASK_ID:
        return []  # nothing can come after it (Redis refuses the exclusive range)
    with translated("pending"):
        try:
            rows = redis_of(q).xpending_range(q.keys.tasks(rid), GROUP, start, "+", count)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            return []  # a finished request's stream is gone: nothing is pending
        pipe = redis_of(q).pipeline(transaction=False)
        if lease_scores(q, pipe, rid, rows):
            expiries, revoked = pipe.execute()
        else:
            expiries = revoked = []
    return pending_entries(rows, expiries, revoked)


def lease_scores(q: QueueBase, pipe: Any, rid: str, rows: list[dict[str, Any]]) -> bool:
    """Add to `pipe` the reads of these pending rows' lease expiries and revocations (two
    replies), if there are rows; says whether it added them."""
    tokens = [f"{rid}/{r['message_id']}/{r['times_delivered']}" for r in rows]
    if tokens:
        pipe.zmscore(q.keys.leases, tokens).zmscore(q.keys.revoked, tokens)
    return bool(tokens)


def pending_entries(
    rows: list[dict[str, Any]], expiries: list[Any], revoked: list[Any]
) -> list[PendingEntry]:
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


def task_payloads(q: QueueBase, request_id: str, task_ids: list[str]) -> dict[str, str]:
    """The payloads (JSON text, as submitted) of these tasks of a request, in one pipelined
    read; a task id the request does not hold is left out."""
    validate_id(request_id, "request id")
    ids = [validate_task_id(t) for t in task_ids]
    if not ids:
        return {}
    stream = q.keys.tasks(request_id)
    pipe = redis_of(q).pipeline(transaction=False)
    for tid in ids:
        pipe.xrange(stream, tid, tid)
    with translated("task payloads"):
        replies = pipe.execute()
    return {tid: fields.get("p", "") for rows in replies for tid, fields in rows}


def first_payloads(q: QueueBase, request_id: str, n: int) -> list[tuple[str, str]]:
    """The request's first `n` tasks: (task id, payload JSON text)."""
    validate_id(request_id, "request id")
    with translated("task payloads"):
        rows = redis_of(q).xrange(q.keys.tasks(request_id), "-", "+",
                                  count=int_in(n, "n", 1, MAX_PAGE))
    return [(eid, fields.get("p", "")) for eid, fields in rows]

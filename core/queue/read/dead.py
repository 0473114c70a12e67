"""Dead letters: a page of them, those of one request, which of some are still there."""

from __future__ import annotations

from ..base import QueueBase, translated
from ..keys import validate_id, validate_task_id
from ..models import DeadLetter
from .common import PIPELINE_CHUNK, redis_of


def dead_letters_present(q: QueueBase, entry_ids: list[str]) -> set[str]:
    """Those of these dead letters still in the queue's dead-letter stream (one round trip,
    CHUNK ids a pipeline)."""
    ids = [validate_task_id(i) for i in entry_ids]
    present: set[str] = set()
    for i in range(0, len(ids), PIPELINE_CHUNK):
        part = ids[i : i + PIPELINE_CHUNK]
        pipe = redis_of(q).pipeline(transaction=False)
        for eid in part:
            pipe.xrange(q.keys.dead, eid, eid, count=1)
        with translated("dead letters"):
            present |= {eid for eid, rows in zip(part, pipe.execute(), strict=True) if rows}
    return present


def dead_letters(q: QueueBase, *, before: str | None = None, count: int = 50) -> list[DeadLetter]:
    """A page of dead letters, newest first; pass the last id as `before` for the next."""
    if before is not None and before.strip() in ("0", "0-0"):
        return []  # nothing comes before the first id (Redis refuses the range "(0-0")
    top = "+" if before is None else f"({before}"
    with translated("dead_letters"):
        rows = redis_of(q).xrevrange(q.keys.dead, top, "-", count=count)
    return [DeadLetter.from_entry(eid, f) for eid, f in rows]


def request_dead_letters(q: QueueBase, request_id: str) -> list[DeadLetter]:
    """The dead letters of one request (its tasks out of attempts), oldest first: read by
    name through the request's task -> letter map, no scan of the dead stream."""
    rid = validate_id(request_id, "request id")
    r = redis_of(q)
    with translated("request dead letters"):
        ids = sorted(set(r.hvals(q.keys.dead_map(rid))))
        if not ids:
            return []
        pipe = r.pipeline(transaction=False)
        for did in ids:
            pipe.xrange(q.keys.dead, did, did)
        found = pipe.execute()
    return [DeadLetter.from_entry(eid, fields) for rows in found for eid, fields in rows]

"""A request's events kept in the database (core.models.RequestEvent): its timeline, after the
capped `events` stream has been trimmed behind the mirror.

Every event of the request as a whole is kept (submitted, sealed, cancelled, completed,
reopened, requeued...: a few per request, more only as operators act on it). Events of single
tasks (retried, dead, reaped, released, claimed, moved, added) are kept up to
TASK_EVENTS_KEPT per run of the request (from its submit, and again from each reopening), so a
request of a million failing tasks costs a bounded number of rows; the others are counted on
its row (Request.events_dropped) and the timeline says how many it leaves out.

Written in the mirror's batch transaction with the request rows, from the events newer than
the row's `last_event_id` only, so that replaying the stream writes nothing twice.
"""

from __future__ import annotations

from typing import Any

import orjson

from core.models import RequestEvent
from core.queue.follow import Entry, sid

TASK_EVENTS_KEPT = 200  # task events kept per run of a request
NEW_RUN = ("submitted", "reopened")  # the task events' count starts again
# Fields that are not the event's detail: its kind and request (columns), and what the
# engine adds for the search index only (the first tasks' ids and payload text).
NOT_DETAIL = frozenset({"type", "request", "task", "ids", "text"})
COLUMNS = ["queue", "request_id", "entry_id", "at_ms", "kind", "task_id", "detail"]

Event = tuple[str, str, str, int, str, str, str]  # COLUMNS' values


def is_task_event(f: dict[str, str]) -> bool:
    return "task" in f or f.get("type") == "added"


def detail_of(f: dict[str, str]) -> str:
    """The event's fields but its kind, request and task, and the search fields, as compact
    JSON text (orjson: what json.dumps(ensure_ascii=False, separators=(",", ":")) writes, at a
    third of its cost)."""
    rest = {k: v for k, v in f.items() if k not in NOT_DETAIL}
    return orjson.dumps(rest).decode() if rest else ""


def kept(
    queue: str, rid: str, row: dict[str, Any], events: list[Entry], seen: str
) -> list[Event]:
    """The rows of the events (in stream order) newer than `seen` (the last the request's row
    had applied) that are kept; counts them, and those left out, on `row` (its task_events and
    events_dropped)."""
    after = sid(seen)
    # Usually all of them are new: the first new one is the first one.
    first = next((i for i, (eid, _) in enumerate(events) if sid(eid) > after), len(events))
    out: list[Event] = []
    counted, dropped = row["task_events"] or 0, row["events_dropped"] or 0
    for eid, f in events[first:]:
        kind = f.get("type", "")[:20]
        if kind in NEW_RUN:
            counted = 0
        if is_task_event(f):
            if counted >= TASK_EVENTS_KEPT:
                dropped += 1
                continue
            counted += 1
        out.append((queue, rid, eid, int(eid.partition("-")[0]), kind, f.get("task", "")[:40],
                    detail_of(f)))
    row["task_events"], row["events_dropped"] = counted, dropped
    return out


def in_order(events: list[RequestEvent]) -> list[RequestEvent]:
    """Events in the order the engine wrote them (their stream ids)."""
    return sorted(events, key=lambda e: sid(e.entry_id))

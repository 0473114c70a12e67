"""A request's row (core.models.Request): what it said, brought forward by its hash when read and
by its events not applied yet.

A row is its Redis hash when the mirror reads it, so what a row says never depends on which
events were seen: replaying them changes nothing. What only events carry is counted once per
event id: `last_event_id` is the newest one applied, and a completion older than it is not
counted again. The hash is not read for a request whose new events end with its completion
(`completed` carries the final state and counters) and whose row exists: the events bring the
row forward. When the hash is gone (retention over), the row keeps what it said, updated by the
events' own fields, and gets `expired_at`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from core.models import Request
from core.queue.follow import Entry, sid
from core.queue.models import TERMINAL_STATES, RequestInfo

# Every field an upsert writes (all but the key), and a new row's values before any.
FIELDS = [
    f.name for f in Request._meta.concrete_fields
    if f.name not in ("id", "queue", "request_id")
]
DEFAULTS = {
    f.name: f.get_default() for f in Request._meta.concrete_fields if f.name in FIELDS
} | {"state": "active", "updated_at": None}  # "active" unless the events say more
# Events whose effect on the row a later `completed` of the same request supersedes: task
# events (its counters say what came of them) and the cancel (its state says it).
SUPERSEDED = frozenset({"retried", "dead", "reaped", "released", "moved", "cancelled"})

Row = dict[str, Any]  # a Request row's FIELDS by name


@lru_cache(maxsize=8192)
def ms_dt(ms: int) -> datetime:
    # Cached: at thousands of events a second many share their millisecond.
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def id_dt(entry_id: str) -> datetime:
    """The time in a stream id (the Redis server's clock when the entry was added)."""
    return ms_dt(int(entry_id.partition("-")[0] or 0))


def final_by_events(events: list[Entry]) -> bool:
    """True if these events (one request's, in stream order) end with its completion and say
    nothing else its `completed` event does not: its row follows from them without its hash,
    once the row exists."""
    if not events or events[-1][1].get("type") != "completed":
        return False
    return all(f.get("type") in SUPERSEDED for _, f in events[:-1])


def merge(
    rid: str,
    old: Row | None,
    info: RequestInfo | None,
    events: list[Entry],
    now: datetime,
    *,
    reconciled_to: str = "",
    by_events: bool = False,
) -> Row:
    """One request's new row: its hash if read (`info`), else the old row brought forward by
    the events not applied yet (`by_events`: the hash was not read because the events say all;
    otherwise the hash is gone, and the row is marked expired)."""
    row: Row = dict(old) if old is not None else dict(DEFAULTS)
    last = row["last_event_id"]
    seen = sid(last)
    fresh = [(eid, f) for eid, f in events if sid(eid) > seen] if last else events
    row["completions"] += sum(1 for _, f in fresh if f.get("type") == "completed")
    newest = max([last, reconciled_to, *(e for e, _ in events)], key=sid)
    row["last_event_id"] = newest
    times = [id_dt(eid) for eid, _ in events]
    if row["updated_at"] is not None:
        times.append(row["updated_at"])  # never back: replaying older events changes nothing
    if info is not None:
        _from_hash(row, info)
        if reconciled_to and info.state in TERMINAL_STATES:
            row["completions"] = max(row["completions"], 1)  # its completed event may be lost
    elif by_events and old is not None:
        # Its hash, when last read, may have seen this completion already: its time stands.
        finished = old["finished_at"] if old["state"] in TERMINAL_STATES else None
        for eid, f in fresh:
            _from_event(row, eid, f)
        if finished is not None:
            row["finished_at"] = finished
    else:
        if old is None:
            row["created_at"] = min(times) if times else now
        for eid, f in fresh:
            _from_event(row, eid, f)
        row["expired_at"] = row["expired_at"] or now
    row["updated_at"] = max([row["updated_at"] or row["created_at"], *times])
    return row


def _from_hash(row: Row, h: RequestInfo) -> None:
    final = h.state in TERMINAL_STATES
    row.update(
        state=h.state, priority=h.priority, concurrency=h.concurrency, tenant=h.tenant,
        handler=h.handler, max_attempts=h.max_attempts, total=h.total, waiting=h.waiting,
        leased=h.leased, delayed=h.delayed, done=h.done, dead=h.dead, cancelled=h.cancelled,
        discarded=h.discarded, created_at=ms_dt(h.created_ms),
        updated_at=ms_dt(max(h.updated_ms, h.created_ms)),
        finished_at=ms_dt(h.finished_ms) if final and h.finished_ms else None, expired_at=None,
    )


def _from_event(row: Row, eid: str, f: dict[str, str]) -> None:
    """What an event says of its request, for a row whose hash was not read."""
    kind = f.get("type")
    final = row["state"] in TERMINAL_STATES

    def num(name: str) -> int:
        return int(f.get(name) or 0)

    if kind == "submitted":
        row.update(total=num("tasks"), priority=num("priority"), tenant=f.get("tenant", ""))
    elif kind == "sealed":
        row["total"] = num("tasks")
        if not final:
            row["state"] = "active"
    elif kind == "cancelled" and not final:
        row["state"] = "cancelling"
    elif kind == "completed":
        row.update(state=f.get("state") or row["state"], done=num("done"), dead=num("dead"),
                   cancelled=num("cancelled"), waiting=0, leased=0, delayed=0,
                   finished_at=id_dt(eid))
    elif kind == "reopened":
        row.update(state="active", finished_at=None)

"""A request's timeline: every event of it in the order the engine wrote them, each in words.

The events come from the database (core.models.RequestEvent, kept by the mirror for as long as
the request's history) and from the queue's `events` stream for those the mirror has not
written yet (the last second or so); one event read from both is shown once. A request
mirrored before the events were kept has none in the database: its creation and last
completion then come from its Request row, marked so.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from core.models import Request, RequestEvent
from core.queue.follow import sid

# Kinds whose colour is their outcome's: a completion is green, red or grey by its state.
STATE_KINDS = ("completed",)


@dataclass(frozen=True)
class Event:
    at: int | dt.datetime  # ms since the epoch, or a datetime
    kind: str
    text: str  # what happened, in words
    tone: str  # the colour: done, failed, cancelled, retry, moved, dead, info
    entry_id: str = ""  # its id in the events stream ("": from the request's row)

    @property
    def history(self) -> bool:
        return not self.entry_id


@dataclass(frozen=True)
class Timeline:
    events: list[Event]
    dropped: int  # task events the history did not keep (see core.mirror.events)


def _detail(text: str) -> dict[str, str]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _n(f: dict[str, str], name: str) -> int:
    try:
        return int(f.get(name) or 0)
    except ValueError:
        return 0


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def describe(kind: str, task: str, f: dict[str, str]) -> tuple[str, str]:
    """An event in words, and its tone."""
    of = f"task {task}" if task else ""
    worker = f.get("worker", "")
    if kind == "submitted":
        return (f"{_plural(_n(f, 'tasks'), 'task')}, priority {f.get('priority', '?')}, "
                f"tenant {f.get('tenant', '?')}"), "info"
    if kind in ("added", "sealed"):
        return _plural(_n(f, "tasks"), "task") + (" in all" if kind == "sealed" else ""), "info"
    if kind == "retried":
        delay = _n(f, "delay")
        again = f"runs again in {delay:,} ms" if delay else "runs again now"
        return (f"{of} failed attempt {f.get('attempt', '?')} on {worker or '?'}: "
                f"{f.get('error', '')}; {again}"), "retry"
    if kind == "dead":
        return f"{of} out of attempts on {worker or '?'}: {f.get('error', '')}", "dead"
    if kind == "reaped":
        outcome = f.get("outcome", "?")
        return (f"{of}: the lease of {worker or '?'} expired; "
                f"{'dead-lettered' if outcome == 'dead' else 'back to ' + outcome}",
                "dead" if outcome == "dead" else "retry")
    if kind == "released":
        by = f.get("by", "")
        who = ("its worker gave it back" if by == "worker" else
               "reclaimed from a worker that exited" if by == "reclaim" else
               "an operator released it")
        return f"{of} of {worker or f.get('from', '?')}: {who}; back to waiting", "moved"
    if kind == "claimed":
        return f"{of} taken from {f.get('from', '?')} for {worker or '?'}", "moved"
    if kind == "moved":
        to = f.get("to") or ""
        return (f"{of} moved on ({f.get('outcome', '?')}{' to ' + to if to else ''}) after "
                f"its holder stopped ({f.get('by', '?')})"), "moved"
    if kind == "requeued":
        return "dead letters requeued", "moved"
    if kind == "reopened":
        return "back to active: it completes again once its requeued tasks finish", "moved"
    if kind == "discarded":
        return f"{_plural(_n(f, 'count'), 'dead letter')} deleted", "cancelled"
    if kind == "cancelled":
        after = f" (its parent {f['after']} was cancelled)" if f.get("after") else ""
        return (f"{_plural(_n(f, 'dropped'), 'waiting task')} dropped, "
                f"{_plural(_n(f, 'running'), 'running task')} told to stop{after}"), "cancelled"
    if kind == "completed":
        state = f.get("state", "?")
        return (f"{state}: {_n(f, 'done'):,} done, {_n(f, 'dead'):,} dead, "
                f"{_n(f, 'cancelled'):,} cancelled"), state if state in (
                    "done", "failed", "cancelled") else "info"
    if kind == "unheld":
        return f"its parent {f.get('after', '?')} is done: it runs", "info"
    if kind == "due":
        return f"its due time came ({f.get('by', '?')})", "info"
    rest = ", ".join(f"{k} {v}" for k, v in f.items())
    return (f"{of}{'; ' if of and rest else ''}{rest}"), "info"


def of_row(e: RequestEvent) -> Event:
    text, tone = describe(e.kind, e.task_id, _detail(e.detail))
    return Event(e.at_ms, e.kind, text, tone, e.entry_id)


def of_entry(eid: str, f: dict[str, str]) -> Event:
    kind = f.get("type", "?")
    rest = {k: v for k, v in f.items() if k not in ("type", "request", "task", "ids", "text")}
    text, tone = describe(kind, f.get("task", ""), rest)
    return Event(sid(eid)[0], kind, text, tone, eid)


def stored(queue: str, request_id: str) -> list[RequestEvent]:
    """The request's events the history keeps, in stream order (the (queue, request, at)
    index)."""
    rows = {e.entry_id: e for e in RequestEvent.objects.filter(queue=queue,
                                                               request_id=request_id)
            .order_by("at_ms", "id")}  # each event once (see RequestEvent's indexes)
    return sorted(rows.values(), key=lambda e: sid(e.entry_id))


def build(
    rows: list[RequestEvent], live: list[tuple[str, dict[str, str]]], db: Request | None,
    created: int | dt.datetime,
) -> Timeline:
    """The timeline from the history's rows and the stream's entries (`live`), oldest first;
    with neither, what the request's row says (its creation, its last completion)."""
    seen = {e.entry_id for e in rows}
    events = [of_row(e) for e in rows] + [of_entry(eid, f) for eid, f in live
                                           if eid not in seen]
    kinds = {e.kind for e in events}
    if "submitted" not in kinds:
        events.append(Event(created, "submitted", "(from the history: its events are no longer "
                            "kept)", "info"))
    if db is not None and db.finished_at and not rows and "completed" not in kinds:
        times = _plural(db.completions, "time")
        events.append(Event(db.finished_at, "completed",
                            f"{db.state} (from the history; completed {times} in all)",
                            db.state if db.state in ("done", "failed", "cancelled") else "info"))
    events.sort(key=lambda e: (_ms(e.at), sid(e.entry_id) if e.entry_id else (0, 0)))
    return Timeline(events, (db.events_dropped or 0) if db is not None else 0)


def _ms(at: int | dt.datetime) -> int:
    return at if isinstance(at, int) else int(at.timestamp() * 1000)

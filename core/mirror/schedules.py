"""Recurring schedules in the database: every sampling round, each queue's schedules (read
through core.queue.schedule's store) are compared with their ScheduleRecord rows and the rows that
differ are written; a schedule gone from Redis keeps its row, with `removed_at`.

Cheap when nothing changed: Redis is asked for a few fields per schedule (its version, next
slot, counters), the database for the queue's rows, and nothing is written; a definition is
read only for a schedule whose version (or incarnation) the row does not have yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from django.db import transaction

from core.models import ScheduleRecord
from core.queue.client import Queue
from core.queue.read.schedules import ScheduleHead, ScheduleState
from core.queue.schedule.store import Schedules

# Fields that follow the schedule as it fires or is paused, written when they differ.
FOLLOWED = ["version", "paused", "paused_by", "next_run", "last_slot", "fired", "skipped",
            "errors", "updated_at", "seen_at"]


@dataclass
class Synced:
    created: int = 0
    changed: int = 0  # definition changed (or a new incarnation, or back after a loss)
    followed: int = 0  # only its next slot, pause or counters moved
    removed: int = 0


def _dt(ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(ms / 1000, tz=UTC) if ms else None


def _followed(h: ScheduleHead, now: datetime) -> dict[str, Any]:
    return {
        "version": h.version, "paused": h.paused, "paused_by": h.paused_by,
        "next_run": None if h.paused else _dt(h.next_ms), "last_slot": _dt(h.last_slot),
        "fired": h.fired, "skipped": h.skipped, "errors": h.errors,
        "updated_at": _dt(h.updated_ms) or now, "seen_at": now,
    }


def _definition(spec: str) -> dict[str, Any]:
    try:
        value = orjson.loads(spec)
    except orjson.JSONDecodeError:
        return {"unreadable": spec[:10_000]}
    return value if isinstance(value, dict) else {"unreadable": spec[:10_000]}


def mirror_schedules(q: Queue, *, now: datetime | None = None) -> Synced:
    """Bring the queue's ScheduleRecord rows up to what Redis says (idempotent)."""
    now = now or datetime.now(UTC)
    store = Schedules(q)
    # Redis first, then the database: a removal through core.ops in between (Redis, then its
    # row marked) is then seen as such, not undone (see `stale` below).
    heads = store.heads()
    rows = {r.name: r for r in ScheduleRecord.objects.filter(queue=q.name).defer("definition")}
    out = Synced()
    new, full, follow = [], [], []
    for name, h in heads.items():
        row = rows.get(name)
        if row is None:
            new.append(name)
            continue
        same = row.created_ms == h.created_ms
        if row.removed_at is not None and row.removed_by and same:
            continue  # read before an operator removed it: its row says so already
        if row.removed_at is not None or not same or row.version != h.version:
            full.append(name)
        elif any(getattr(row, f) != v for f, v in _followed(h, now).items()
                 if f != "seen_at"):
            follow.append(row)
    specs = store.specs(new + full)
    gone = [n for n, r in rows.items() if r.removed_at is None and n not in heads]
    with transaction.atomic():
        created = []
        for name in new:
            if name not in specs:
                continue  # removed meanwhile
            h = heads[name]
            created.append(ScheduleRecord(
                queue=q.name, name=name, definition=_definition(specs[name]),
                created_at=_dt(h.created_ms) or now, created_ms=h.created_ms,
                **_followed(h, now)))
        ScheduleRecord.objects.bulk_create(created, ignore_conflicts=True)
        out.created = len(created)
        for name in full:
            if name not in specs:
                continue
            row, h = rows[name], heads[name]
            fields: dict[str, Any] = {"definition": _definition(specs[name]),
                                      "created_ms": h.created_ms, "removed_at": None,
                                      "removed_by": "", **_followed(h, now)}
            lost_and_back = row.removed_at is not None and not row.removed_by
            if row.created_ms != h.created_ms and not lost_and_back:
                fields["created_at"] = _dt(h.created_ms) or now  # a new schedule, same name
            # Only a row no operator marked removed meanwhile (or one that was back already).
            ScheduleRecord.objects.filter(pk=row.pk, removed_by=row.removed_by).update(**fields)
            out.changed += 1
        for row in follow:
            for f, v in _followed(heads[row.name], now).items():
                setattr(row, f, v)
        ScheduleRecord.objects.bulk_update(follow, FOLLOWED)
        out.followed = len(follow)
        if gone:
            out.removed = ScheduleRecord.objects.filter(
                queue=q.name, name__in=gone, removed_at__isnull=True).update(removed_at=now)
    return out


def mark_removed(queue: str, name: str, by: str, *, was: ScheduleState | None = None,
                 now: datetime | None = None) -> None:
    """An operator removed the schedule (core.ops): its row says who, so that `schedule
    restore` leaves it removed. `was`: the schedule as it was, for a row the mirror had not
    written yet."""
    now = now or datetime.now(UTC)
    # A row an operator marked already keeps who removed it first.
    marked = ScheduleRecord.objects.filter(queue=queue, name=name, removed_by="").update(
        removed_at=now, removed_by=by or "?")
    if marked or was is None:
        return
    head = was.head
    ScheduleRecord.objects.bulk_create([ScheduleRecord(
        queue=queue, name=name, definition=_definition(was.schedule.to_json()),
        created_at=_dt(head.created_ms) or now, created_ms=head.created_ms,
        removed_at=now, removed_by=by or "?", **_followed(head, now))], ignore_conflicts=True)

"""A queue's recurring schedules as stored (core/queue/schedule/store.py writes them): one
schedule, every one of them, their heads (what changes as they fire), their definitions,
their counts by status, a schedule's last runs, and the states of the requests runs made."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from ..base import QueueBase, translated
from ..schedule.keys import ScheduleKeys
from ..schedule.spec import Schedule


@dataclass(frozen=True)
class Run:
    """One entry of a schedule's runs list: a slot fired, skipped, missed, or an error."""

    at_ms: int
    status: str  # fired, run-now, overlap (skipped), missed (count skipped), error
    slot_ms: int | None = None
    request_id: str | None = None
    note: str = ""
    count: int = 0
    by: str = ""

    @classmethod
    def from_json(cls, text: str) -> Run:
        d = orjson.loads(text)
        slot = d.get("slot")
        return cls(at_ms=int(d.get("at") or 0), status=str(d.get("status", "")),
                   slot_ms=int(slot) if slot not in (None, "") else None,
                   request_id=d.get("rid") or None, note=str(d.get("note") or ""),
                   count=int(d.get("count") or 0), by=str(d.get("by") or ""))


@dataclass(frozen=True)
class ScheduleState:
    """A schedule as stored: its definition and where it stands."""

    schedule: Schedule
    version: int
    next_ms: int | None
    paused: bool
    paused_by: str
    pending: str | None
    pending_at: int | None
    last_slot: int | None
    last_rids: tuple[str, ...]
    fired: int
    skipped: int
    errors: int
    created_ms: int
    updated_ms: int

    @property
    def name(self) -> str:
        return self.schedule.name

    @property
    def head(self) -> ScheduleHead:
        return ScheduleHead(
            name=self.name, version=self.version, next_ms=self.next_ms, paused=self.paused,
            paused_by=self.paused_by, pending=self.pending is not None,
            last_slot=self.last_slot, fired=self.fired, skipped=self.skipped,
            errors=self.errors, created_ms=self.created_ms, updated_ms=self.updated_ms)

    @classmethod
    def from_hash(cls, h: dict[str, str]) -> ScheduleState:
        def num(key: str) -> int | None:
            v = h.get(key)
            return int(v) if v else None

        return cls(
            schedule=Schedule.from_json(h["spec"]), version=num("version") or 0,
            next_ms=num("next"), paused="paused" in h, paused_by=h.get("paused_by", ""),
            pending=h.get("pending"), pending_at=num("pending_at"), last_slot=num("last_slot"),
            last_rids=tuple(h.get("last_rids", "").split()), fired=num("fired") or 0,
            skipped=num("skipped") or 0, errors=num("errors") or 0,
            created_ms=num("created_ms") or 0, updated_ms=num("updated_ms") or 0,
        )


@dataclass(frozen=True)
class ScheduleHead:
    """What changes as a schedule is edited, paused and fired, without its definition: the
    mirror compares it with its rows, /metrics counts it."""

    name: str
    version: int
    next_ms: int | None
    paused: bool
    paused_by: str
    pending: bool  # a claimed slot not confirmed submitted yet
    last_slot: int | None
    fired: int
    skipped: int
    errors: int
    created_ms: int
    updated_ms: int

    @property
    def status(self) -> str:
        """active (it has a slot to come), paused, or ended (no slot left)."""
        if self.paused:
            return "paused"
        return "active" if self.next_ms is not None or self.pending else "ended"


HEAD_FIELDS = ("version", "next", "paused", "paused_by", "pending", "last_slot", "fired",
               "skipped", "errors", "created_ms", "updated_ms")


def schedule(q: QueueBase, name: str) -> ScheduleState | None:
    """The schedule `name` of queue `q`, or None."""
    with translated("schedule read"):
        h = q.redis.hgetall(ScheduleKeys(q.keys).schedule(name))
    return ScheduleState.from_hash(h) if h.get("spec") else None


def schedule_names(q: QueueBase) -> list[str]:
    with translated("schedule list"):
        return list(q.redis.zrange(ScheduleKeys(q.keys).names, 0, -1))


def schedules(q: QueueBase) -> list[ScheduleState]:
    """Every schedule of the queue, by name (two round trips)."""
    names = schedule_names(q)
    if not names:
        return []
    keys = ScheduleKeys(q.keys)
    with translated("schedule list"):
        pipe = q.redis.pipeline(transaction=False)
        for n in names:
            pipe.hgetall(keys.schedule(n))
        rows = pipe.execute()
    return [ScheduleState.from_hash(h) for h in rows if h.get("spec")]


def schedule_heads(q: QueueBase) -> dict[str, ScheduleHead]:
    """Every schedule's ScheduleHead by name (two round trips, a few fields each)."""
    names = schedule_names(q)
    if not names:
        return {}
    keys = ScheduleKeys(q.keys)
    with translated("schedule list"):
        pipe = q.redis.pipeline(transaction=False)
        for n in names:
            pipe.hmget(keys.schedule(n), *HEAD_FIELDS)
        rows = pipe.execute()

    def num(v: str | None) -> int | None:
        return int(v) if v else None

    out = {}
    for n, row in zip(names, rows, strict=True):
        f = dict(zip(HEAD_FIELDS, row, strict=True))
        if f["version"] is None:  # removed between the two reads
            continue
        out[n] = ScheduleHead(
            name=n, version=int(f["version"]), next_ms=num(f["next"]),
            paused=f["paused"] is not None, paused_by=f["paused_by"] or "",
            pending=bool(f["pending"]), last_slot=num(f["last_slot"]),
            fired=num(f["fired"]) or 0, skipped=num(f["skipped"]) or 0,
            errors=num(f["errors"]) or 0, created_ms=num(f["created_ms"]) or 0,
            updated_ms=num(f["updated_ms"]) or 0)
    return out


def schedule_specs(q: QueueBase, names: list[str]) -> dict[str, str]:
    """The definitions (JSON text, as stored) of the schedules `names` that exist."""
    if not names:
        return {}
    keys = ScheduleKeys(q.keys)
    with translated("schedule read"):
        pipe = q.redis.pipeline(transaction=False)
        for n in names:
            pipe.hget(keys.schedule(n), "spec")
        rows = pipe.execute()
    return {n: spec for n, spec in zip(names, rows, strict=True) if spec}


def schedule_counts(q: QueueBase) -> dict[str, int]:
    """How many schedules are active, paused and ended."""
    out = dict.fromkeys(("active", "paused", "ended"), 0)
    for h in schedule_heads(q).values():
        out[h.status] += 1
    return out


def schedule_runs(q: QueueBase, name: str, count: int = 20) -> list[Run]:
    """The schedule's last runs, newest first."""
    with translated("schedule runs"):
        rows = q.redis.lrange(ScheduleKeys(q.keys).runs(name), 0, max(0, count - 1))
    return [Run.from_json(r) for r in rows]


def request_states(q: QueueBase, rids: list[str]) -> dict[str, str]:
    """Each request's state now ("" once it has expired), for a runs list."""
    if not rids:
        return {}
    with translated("schedule runs"):
        pipe = q.redis.pipeline(transaction=False)
        for rid in rids:
            pipe.hget(q.keys.request(rid), "state")
        states = pipe.execute()
    return {rid: st or "" for rid, st in zip(rids, states, strict=True)}

"""A queue's recurring schedules in Redis: the one API that reads and writes their keys.

Every change is one Lua script (lua/), loaded once per store with register_script (EVALSHA;
NOSCRIPT after a Redis restart is handled by redis-py). All keys carry the queue's hash tag.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

import orjson

from core.queue import Queue, registry
from core.queue.base import translated
from core.queue.errors import QueueError, StateChanged, UnknownHandlerWarning

from .keys import ScheduleKeys
from .spec import InvalidSchedule, Schedule

RUNS_KEPT = 50
SCRIPTS = ("upsert", "claim", "settle", "toggle", "remove", "note")


class ScheduleExists(InvalidSchedule):
    """A schedule of this name already exists in the queue."""


class UnknownSchedule(QueueError, LookupError):
    """No schedule of this name in the queue."""


@cache
def _source(name: str) -> str:
    return files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


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


@dataclass(frozen=True)
class Change:
    status: str  # created, updated, unchanged
    version: int


class Schedules:
    """The recurring schedules of one queue."""

    def __init__(self, queue: Queue) -> None:
        self.q = queue
        self.keys = ScheduleKeys(queue.keys)
        self._scripts = {n: queue.redis.register_script(_source(n)) for n in SCRIPTS}

    @property
    def redis(self) -> Any:
        return self.q.redis

    def now_ms(self) -> int:
        """The time schedules run on: the queue's (an injected clock, else Redis')."""
        return self.q.now_ms()

    def _script(self, name: str, keys: list[str], args: list[Any]) -> Any:
        with translated(f"schedule {name}"):
            return self._scripts[name](keys=keys, args=args)

    def _hkeys(self, name: str) -> list[str]:
        return [self.keys.schedule(name), self.keys.due]

    # -- definitions ----------------------------------------------------------------------

    def upsert(self, schedule: Schedule, *, mode: str = "upsert",
               expect_version: int | None = None, now_ms: int | None = None) -> Change:
        """Store `schedule` (validated): create it, or change it if its definition differs
        (its next slot is then computed afresh from now, after the last slot it fired).
        Idempotent: the same definition again changes nothing. mode "create" refuses an
        existing name (ScheduleExists), "replace" a missing one (UnknownSchedule)."""
        s = schedule.validated()
        if s.queue != self.q.name:
            raise InvalidSchedule(f"schedule {s.name!r} names queue {s.queue!r}, not "
                                  f"{self.q.name!r}")
        now = self.now_ms() if now_ms is None else now_ms
        last = self._field(s.name, "last_slot")
        nxt = s.after(max(now, int(last)) if last else now)
        reply = self._script("upsert", [*self._hkeys(s.name), self.keys.names], [
            s.name, s.to_json(), "" if nxt is None else nxt, now, mode,
            "" if expect_version is None else expect_version])
        code = int(reply[0])
        if code == -1:
            raise ScheduleExists(f"a schedule named {s.name!r} already exists in queue "
                                 f"{self.q.name!r}; choose another name or edit it")
        if code == -2:
            raise UnknownSchedule(f"no schedule {s.name!r} in queue {self.q.name!r}")
        if code == -7:
            raise StateChanged(f"schedule {s.name!r} was changed meanwhile; reload it and "
                               "edit again")
        # The scheduler loops find queues in the registry; if this fails, the schedule is
        # stored anyway and the next upsert or submit registers the queue.
        with contextlib.suppress(QueueError):
            registry.touch([self.q])
        return Change({0: "unchanged", 1: "created", 2: "updated"}[code], int(reply[1]))

    def _field(self, name: str, field: str) -> str | None:
        with translated("schedule read"):
            value: str | None = self.redis.hget(self.keys.schedule(name), field)
            return value

    def get(self, name: str) -> ScheduleState | None:
        """The schedule `name`, or None."""
        with translated("schedule read"):
            h = self.redis.hgetall(self.keys.schedule(name))
        return ScheduleState.from_hash(h) if h.get("spec") else None

    def require(self, name: str) -> ScheduleState:
        state = self.get(name)
        if state is None:
            raise UnknownSchedule(f"no schedule {name!r} in queue {self.q.name!r}")
        return state

    def names(self) -> list[str]:
        with translated("schedule list"):
            return list(self.redis.zrange(self.keys.names, 0, -1))

    def all(self) -> list[ScheduleState]:
        """Every schedule of the queue, by name (two round trips)."""
        names = self.names()
        if not names:
            return []
        with translated("schedule list"):
            pipe = self.redis.pipeline(transaction=False)
            for n in names:
                pipe.hgetall(self.keys.schedule(n))
            rows = pipe.execute()
        return [ScheduleState.from_hash(h) for h in rows if h.get("spec")]

    def heads(self) -> dict[str, ScheduleHead]:
        """Every schedule's ScheduleHead by name (two round trips, a few fields each)."""
        names = self.names()
        if not names:
            return {}
        with translated("schedule list"):
            pipe = self.redis.pipeline(transaction=False)
            for n in names:
                pipe.hmget(self.keys.schedule(n), *HEAD_FIELDS)
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

    def specs(self, names: list[str]) -> dict[str, str]:
        """The definitions (JSON text, as stored) of the schedules `names` that exist."""
        if not names:
            return {}
        with translated("schedule read"):
            pipe = self.redis.pipeline(transaction=False)
            for n in names:
                pipe.hget(self.keys.schedule(n), "spec")
            rows = pipe.execute()
        return {n: spec for n, spec in zip(names, rows, strict=True) if spec}

    def counts(self) -> dict[str, int]:
        """How many schedules are active, paused and ended."""
        out = dict.fromkeys(("active", "paused", "ended"), 0)
        for h in self.heads().values():
            out[h.status] += 1
        return out

    def runs(self, name: str, count: int = 20) -> list[Run]:
        """The schedule's last runs, newest first."""
        with translated("schedule runs"):
            rows = self.redis.lrange(self.keys.runs(name), 0, max(0, count - 1))
        return [Run.from_json(r) for r in rows]

    def outcomes(self, rids: list[str]) -> dict[str, str]:
        """Each request's state now ("" once it has expired), for a runs list."""
        if not rids:
            return {}
        with translated("schedule runs"):
            pipe = self.redis.pipeline(transaction=False)
            for rid in rids:
                pipe.hget(self.q.keys.request(rid), "state")
            states = pipe.execute()
        return {rid: st or "" for rid, st in zip(rids, states, strict=True)}

    def pause(self, name: str, *, by: str = "") -> bool:
        """Fire nothing until resume(); False if it was paused already."""
        reply = self._script("toggle", self._hkeys(name),
                             ["pause", self.now_ms(), "", name, by])
        if int(reply) == -2:
            raise UnknownSchedule(f"no schedule {name!r} in queue {self.q.name!r}")
        return bool(reply)

    def resume(self, name: str) -> bool:
        """Fire again from the next slot after now (the slots of the pause are not run);
        False if it was not paused."""
        state = self.require(name)
        now = self.now_ms()
        nxt = state.schedule.after(max(now, state.last_slot or 0))
        reply = self._script("toggle", self._hkeys(name),
                             ["resume", now, "" if nxt is None else nxt, name, ""])
        if int(reply) == -2:
            raise UnknownSchedule(f"no schedule {name!r} in queue {self.q.name!r}")
        return bool(reply)

    def remove(self, name: str) -> bool:
        """Delete the schedule (its requests stay); False if there was none."""
        keys = [self.keys.schedule(name), self.keys.due, self.keys.names, self.keys.runs(name)]
        return bool(self._script("remove", keys, [name]))

    def run_now(self, name: str, *, by: str = "") -> str:
        """Submit one run at once, outside the schedule's slots; returns its request id. The
        overlap policy then waits for it as for a slot's run."""
        state = self.require(name)
        now = self.now_ms()
        s = state.schedule
        rid = s.run_now_id(now)
        submit(self.q, s, now, rid)
        reply = self._script("note", [self.keys.schedule(name), self.keys.runs(name)],
                             [now, rid, " ".join(s.request_ids(rid)), by, RUNS_KEPT])
        if int(reply) == -2:
            raise UnknownSchedule(f"schedule {name!r} was removed meanwhile (its run "
                                  f"{rid} was submitted)")
        return rid

    def preview(self, schedule: Schedule, n: int = 5) -> list[int]:
        """The next `n` slots of `schedule` from now (validated first)."""
        return schedule.validated().upcoming(self.now_ms(), n)


def submit(q: Queue, s: Schedule, slot_ms: int, rid: str) -> bool:
    """Submit the run of slot `slot_ms` as request `rid`; idempotent on `rid` (False when it
    existed). A data job is its two requests, `rid` and `rid.combine`."""
    if s.job is not None:
        from core.pipeline import jobs

        o = s.options
        options = jobs.QueueOptions(
            priority=o.get("priority", 50), tenant=o.get("tenant", "default"),
            max_attempts=o.get("max_attempts", 3),
            **({"concurrency": o["concurrency"]} if "concurrency" in o else {}))
        return jobs.submit(q, s.job_spec(slot_ms, rid), options)
    assert s.handler is not None
    with warnings.catch_warnings():
        # A schedule may be declared before its workers start; the tasks wait for them.
        warnings.simplefilter("ignore", UnknownHandlerWarning)
        return q.submit(s.tasks, handler=s.handler, request_id=rid, **s.options).created

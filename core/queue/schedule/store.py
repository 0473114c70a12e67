"""A queue's recurring schedules in Redis: the one API that reads and writes their keys.

Every change is one Lua script (lua/), loaded once per store with register_script (EVALSHA;
NOSCRIPT after a Redis restart is handled by redis-py). All keys carry the queue's hash tag.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from core.queue import Queue, registry
from core.queue.base import translated
from core.queue.errors import QueueError, StateChanged, UnknownHandlerWarning
from core.queue.read import schedules
from core.queue.read.schedules import Run, ScheduleHead, ScheduleState

from .keys import ScheduleKeys
from .spec import InvalidSchedule, Schedule

RUNS_KEPT = 50
SCRIPTS = ("upsert", "claim", "settle", "toggle", "remove", "note")
# Submits a data job schedule's run (queue, schedule, slot ms, request id) and says whether it
# was new: the engine knows no data job, so the Django side hands it one
# (core.ops.datajobs.submit_slot: the checks of `datajob submit`, then the job's submit).
JobSubmit = Callable[[Queue, Schedule, int, str], bool]


class ScheduleExists(InvalidSchedule):
    """A schedule of this name already exists in the queue."""


class UnknownSchedule(QueueError, LookupError):
    """No schedule of this name in the queue."""


class CannotSubmitJob(QueueError):
    """A data job schedule's run, with no JobSubmit given to submit it."""


@cache
def _source(name: str) -> str:
    return files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Change:
    status: str  # created, updated, unchanged
    version: int


class Schedules:
    """The recurring schedules of one queue; `submit_job` submits a data job schedule's runs
    (see JobSubmit), for a store that runs them (a scheduler's, a run now). A scheduler's
    store without one leaves data jobs' slots due, for a scheduler that has one."""

    def __init__(self, queue: Queue, *, submit_job: JobSubmit | None = None) -> None:
        self.q = queue
        self.submit_job = submit_job
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

    # -- reads (the engine's read side: core.queue.read.schedules) ---------------------------

    def get(self, name: str) -> ScheduleState | None:
        """The schedule `name`, or None."""
        return schedules.schedule(self.q, name)

    def require(self, name: str) -> ScheduleState:
        state = self.get(name)
        if state is None:
            raise UnknownSchedule(f"no schedule {name!r} in queue {self.q.name!r}")
        return state

    def names(self) -> list[str]:
        return schedules.schedule_names(self.q)

    def all(self) -> list[ScheduleState]:
        """Every schedule of the queue, by name (two round trips)."""
        return schedules.schedules(self.q)

    def heads(self) -> dict[str, ScheduleHead]:
        """Every schedule's ScheduleHead by name (two round trips, a few fields each)."""
        return schedules.schedule_heads(self.q)

    def specs(self, names: list[str]) -> dict[str, str]:
        """The definitions (JSON text, as stored) of the schedules `names` that exist."""
        return schedules.schedule_specs(self.q, names)

    def counts(self) -> dict[str, int]:
        """How many schedules are active, paused and ended."""
        return schedules.schedule_counts(self.q)

    def runs(self, name: str, count: int = 20) -> list[Run]:
        """The schedule's last runs, newest first."""
        return schedules.schedule_runs(self.q, name, count)

    def outcomes(self, rids: list[str]) -> dict[str, str]:
        """Each request's state now ("" once it has expired), for a runs list."""
        return schedules.request_states(self.q, rids)

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
        submit(self.q, s, now, rid, self.submit_job)
        reply = self._script("note", [self.keys.schedule(name), self.keys.runs(name)],
                             [now, rid, " ".join(s.request_ids(rid)), by, RUNS_KEPT])
        if int(reply) == -2:
            raise UnknownSchedule(f"schedule {name!r} was removed meanwhile (its run "
                                  f"{rid} was submitted)")
        return rid

    def preview(self, schedule: Schedule, n: int = 5) -> list[int]:
        """The next `n` slots of `schedule` from now (validated first)."""
        return schedule.validated().upcoming(self.now_ms(), n)


def submit(q: Queue, s: Schedule, slot_ms: int, rid: str,
           submit_job: JobSubmit | None = None) -> bool:
    """Submit the run of slot `slot_ms` as request `rid`; idempotent on `rid` (False when it
    existed). A data job is its two requests, `rid` and `rid.combine`, submitted by
    `submit_job` (CannotSubmitJob without one)."""
    if s.job is not None:
        if submit_job is None:
            raise CannotSubmitJob(f"schedule {s.name!r} runs a data job, and this scheduler "
                                  "was given no way to submit one (manage.py runscheduler's "
                                  "and runservices' can)")
        return submit_job(q, s, slot_ms, rid)  # checked first: a refused run queues nothing
    assert s.handler is not None
    with warnings.catch_warnings():
        # A schedule may be declared before its workers start; the tasks wait for them.
        warnings.simplefilter("ignore", UnknownHandlerWarning)
        return q.submit(s.tasks, handler=s.handler, request_id=rid, **s.options).created

"""One scheduler tick on one queue: find the due schedules (a zset by due time, no scan),
claim their due slots atomically, submit each slot's request, confirm.

Exactly once, whatever number of schedulers race and die:
- at most once: a slot is submitted only by the scheduler whose claim moved the schedule's
  next slot past it (claim.lua compares the version and next slot it read), and its request
  id is derived from the schedule and the slot, so a second submit of it (a takeover, below)
  is the engine's idempotent no-op;
- at least once: the claim records the slots as pending and keeps the schedule in the due
  zset at claim time + PENDING_LEASE_MS; a scheduler that dies between its claim and its
  submit leaves them there, and the next scheduler to see them submits them again and
  settles the claim. So each slot fires while any one scheduler lives.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from core.queue.base import translated
from core.queue.errors import QueueError, RedisReplyError, RedisUnavailable
from core.queue.read.schedules import ScheduleState

from .spec import Schedule
from .store import RUNS_KEPT, Schedules, submit

log = logging.getLogger("queueadmin.schedule")
PENDING_LEASE_MS = 5_000
DUE_BATCH = 500  # schedules looked at per round trip; a tick takes more rounds if need be
TRANSIENT = (RedisUnavailable, RedisReplyError)


@dataclass
class TickReport:
    due: int = 0  # schedules found due
    fired: int = 0  # slots this scheduler submitted (after its claim won)
    skipped: int = 0  # slots skipped by a policy (missed, overlap)
    lost: int = 0  # claims another scheduler (or an edit) got first
    recovered: int = 0  # claims of a dead scheduler taken over and submitted
    errors: int = 0  # slots that could not be submitted (recorded in the runs)
    fired_ids: list[str] = field(default_factory=list)

    def add(self, other: TickReport) -> None:
        for name in ("due", "fired", "skipped", "lost", "recovered", "errors"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.fired_ids += other.fired_ids


_PARSED: dict[str, Schedule] = {}


def _schedule(state_spec: str) -> Schedule:
    """Parsed once per process per definition: a tick reads every due schedule's hash."""
    s = _PARSED.get(state_spec)
    if s is None:
        if len(_PARSED) > 10_000:
            _PARSED.clear()
        s = _PARSED[state_spec] = Schedule.from_json(state_spec)
    return s


def tick(store: Schedules, now_ms: int, *, limit: int = DUE_BATCH,
         shuffle: Callable[[list[Any]], None] = random.shuffle) -> TickReport:
    """Fire what is due at `now_ms` in the store's queue; returns what this scheduler did."""
    report = TickReport()
    k = store.keys
    with translated("scheduler tick"):
        names = store.redis.zrangebyscore(k.due, "-inf", now_ms, start=0, num=limit)
        if not names:
            return report
        shuffle(names)  # several schedulers spread over the due schedules instead of colliding
        pipe = store.redis.pipeline(transaction=False)
        for n in names:
            pipe.hgetall(k.schedule(n))
        rows = pipe.execute()
    report.due = len(names)
    claims: list[tuple[ScheduleState, Schedule, str]] = []
    for h in rows:
        if not h.get("spec"):
            continue  # removed meanwhile
        state = _state(h)
        s = _schedule(h["spec"])
        if s.job is not None and store.submit_job is None:
            continue  # due still, for a scheduler that can submit a data job (Django's)
        if state.pending is not None:
            if now_ms - (state.pending_at or 0) >= PENDING_LEASE_MS:
                report.recovered += _take_over(store, s, state.pending, now_ms, report)
            continue
        if state.paused or state.next_ms is None or state.next_ms > now_ms:
            continue
        fire, missed, following = s.due(state.next_ms, now_ms)
        run = [[str(slot), s.request_id(slot), " ".join(s.request_ids(s.request_id(slot)))]
               for slot in fire]
        pending = orjson.dumps(run).decode()
        report.skipped += missed
        args = [state.version, state.next_ms, "" if following is None else following, now_ms,
                PENDING_LEASE_MS, s.overlap, pending, missed, RUNS_KEPT, s.name]
        claims.append((state, s, pending))
        store._scripts["claim"](keys=[k.schedule(s.name), k.due, k.runs(s.name)], args=args,
                                client=pipe)
    if not claims:
        return report
    with translated("scheduler claim"):
        replies = pipe.execute()
    for (_state_read, s, pending), reply in zip(claims, replies, strict=True):
        if not reply:
            report.lost += 1
            continue
        slots = [(int(reply[i]), str(reply[i + 1])) for i in range(1, len(reply), 2)]
        if not slots:  # all skipped: the previous run is still running
            report.skipped += len(orjson.loads(pending))
            continue
        _submit_and_settle(store, s, slots, pending, now_ms, report)
    return report


def _state(h: dict[str, str]) -> ScheduleState:
    def num(key: str) -> int | None:
        v = h.get(key)
        return int(v) if v else None

    # The parts of ScheduleState a tick needs, without parsing the spec twice.
    return ScheduleState(
        schedule=_schedule(h["spec"]), version=num("version") or 0, next_ms=num("next"),
        paused="paused" in h, paused_by="", pending=h.get("pending"),
        pending_at=num("pending_at"), last_slot=None, last_rids=(), fired=0, skipped=0,
        errors=0, created_ms=0, updated_ms=0)


def _submit_and_settle(store: Schedules, s: Schedule, slots: list[tuple[int, str]],
                       pending: str, now_ms: int, report: TickReport) -> None:
    error = ""
    for slot, rid in slots:
        try:
            created = submit(store.q, s, slot, rid, store.submit_job)
        except TRANSIENT:
            raise  # pending stays: this or another scheduler submits it after the lease
        except (QueueError, ValueError, OSError) as exc:
            # Not submittable as defined (a data job whose input is gone, a refused option):
            # recorded in the runs, and the schedule goes on to its next slot.
            error = f"slot {rid}: {exc}"
            report.errors += 1
            log.warning("schedule %s of queue %s: %s", s.name, store.q.name, error)
            continue
        if created:  # False: a takeover of a slot its claimer had submitted before dying
            report.fired += 1
            report.fired_ids.append(rid)
    with translated("scheduler settle"):
        store._scripts["settle"](
            keys=[store.keys.schedule(s.name), store.keys.due, store.keys.runs(s.name)],
            args=[pending, now_ms, error[:1000], RUNS_KEPT, s.name])


def _take_over(store: Schedules, s: Schedule, pending: str, now_ms: int,
               report: TickReport) -> int:
    """Submit a claim whose scheduler did not confirm it in time (it died, or is stuck)."""
    try:
        run = orjson.loads(pending)
        slots = [(int(slot), str(rid)) for slot, rid, _ in run]
    except (orjson.JSONDecodeError, ValueError, TypeError):
        slots = []
    log.info("schedule %s of queue %s: taking over unconfirmed slots %s", s.name,
             store.q.name, [rid for _, rid in slots])
    _submit_and_settle(store, s, slots, pending, now_ms, report)
    return 1

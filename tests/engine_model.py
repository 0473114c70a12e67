"""A reference model of one queue for the stateful tests, and a reader that rebuilds the true
state of every task from Redis and compares the two (DESIGN.md §3: invariants 1, 2, 5 and 6,
and every counter and index the engine keeps).

The model knows nothing of the Lua scripts: it keeps each task's state by the rules the engine
promises (leases, attempts, backoff, dead letters, cancel, requeue, completion once, delayed
requests and their due times, and the operator's actions: pause, delete of dead letters, claim
checks, reclaim of a dead worker, run now of a delayed request).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis

from core.queue import Queue
from core.queue.models import STATES

RUNNABLE = ("open", "active")
TERMINAL = ("done", "failed", "cancelled")
# "discarded": a dead letter an operator deleted (out of the dead stream and the request's).
TASK_STATES = ("waiting", "delayed", "leased", "done", "dead", "cancelled", "discarded")
BAND = 10**12
PROMOTE_MAX = 100  # due retries one script promotes per priority level


@dataclass
class Task:
    tid: str
    payload: Any
    state: str = "waiting"
    deliveries: int = 0  # the stream's delivery count: part of every lease token
    attempts: int = 0  # deliveries that count against max_attempts (since the last requeue)
    consumer: str | None = None
    token: str | None = None
    expiry: int = 0
    due: int = 0
    dead_id: str | None = None
    # Taken from its holder by an operator (claim, release_task) while the holder may still
    # run it: the revoked lease. It stays leased to the holder (consumer, expiry: the old
    # lease's), with no token, until the old run is over; then it moves on: waiting, or to
    # `claim_to`.
    revoked: str | None = None
    claim_to: str | None = None


@dataclass
class Request:
    rid: str
    priority: int
    tenant: str
    concurrency: int
    max_attempts: int
    lease_ms: int
    backoff_ms: int
    backoff_max_ms: int
    handler: str = "echo"
    state: str = "open"
    tasks: dict[str, Task] = field(default_factory=dict)
    completions: int = 0
    reopens: int = 0
    # Follow-ups ("then", submit_after): the requests held behind this one, and the queue's
    # model, whose follow_on() the completion calls.
    then: list[str] = field(default_factory=list)
    model: QueueModel | None = field(default=None, repr=False)
    # A delayed request (state "scheduled"): when it is due, and the state it takes then
    # ("open" until sealed, then "active").
    due: int = 0
    due_state: str = ""

    def count(self, state: str) -> int:
        return sum(1 for t in self.tasks.values() if t.state == state)

    def of_state(self, state: str) -> list[Task]:
        return [t for t in self.tasks.values() if t.state == state]

    @property
    def eligible(self) -> bool:
        return (
            self.state in RUNNABLE
            and self.count("waiting") > 0
            and self.count("leased") < self.concurrency
        )

    @property
    def free(self) -> int:
        """Tasks a dequeue may lease from this request right now."""
        if not self.eligible:
            return 0
        return min(self.concurrency - self.count("leased"), self.count("waiting"))

    def maybe_complete(self) -> None:
        if self.state not in ("active", "cancelling"):
            return
        if any(t.state in ("waiting", "leased", "delayed") for t in self.tasks.values()):
            return
        if self.state == "cancelling":
            self.state = "cancelled"
        else:
            self.state = "failed" if self.count("dead") or self.count("discarded") else "done"
        self.completions += 1
        if self.model is not None:
            self.model.follow_on(self)


class QueueModel:
    """What one queue must hold: every request and task, and the cumulative counters."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.requests: dict[str, Request] = {}
        self.stats: Counter[str] = Counter()
        self.old_tokens: set[str] = set()  # leases that stopped being valid
        self.dead_ids: dict[str, tuple[str, str]] = {}  # every dead letter id ever: (rid, tid)
        self.events_after = "-"
        self.events: Counter[tuple[str, str]] = Counter()  # (type, request) -> count
        self.completed_states: dict[str, str] = {}  # request -> state of its last completion
        self.idle: dict[str, int] = {}  # idle registrations "<consumer>|<lease_ms>" -> when
        self.handed: dict[str, list[str]] = {}  # consumer -> leases in its handoff list
        self.handed_ever: set[str] = set()
        self.handed_ms: dict[str, int] = {}  # handed lease -> its lease length
        self.wake = False  # the wake-up token idle workers block on (a list of at most one)
        self.paused = False  # an operator paused the queue: nothing is leased, handed or woken
        # The "~scheduled" member of `delayed`: at or before the earliest due time of a delayed
        # request (a cancel or run now leaves it behind until a promotion moves it), None
        # when there is no such member.
        self.sched_mark: int | None = None

    # -- lookups ------------------------------------------------------------------------

    def leased(self) -> list[tuple[Request, Task]]:
        return [(r, t) for r in self.requests.values() for t in r.tasks.values()
                if t.state == "leased"]

    def holder(self, token: str) -> tuple[Request, Task] | None:
        for r, t in self.leased():
            if t.token == token:
                return r, t
        return None

    def revoked(self, token: str) -> tuple[Request, Task] | None:
        """The task whose lease `token` an operator revoked, while its old run may go on."""
        for r, t in self.leased():
            if t.revoked == token:
                return r, t
        return None

    def valid(self, token: str, now: int) -> tuple[Request, Task] | None:
        """The task a lease token holds, if the lease is held and not expired."""
        found = self.holder(token)
        if found and found[1].expiry >= now:
            return found
        return None

    def eligible(self) -> set[str]:
        """Requests the ready index must hold."""
        return {r.rid for r in self.requests.values() if r.eligible}

    def slots(self) -> set[tuple[int, str, str]]:
        return {(r.priority, r.handler, r.tenant) for r in self.requests.values()}

    # -- transitions --------------------------------------------------------------------

    def _unlease(self, t: Task) -> None:
        assert t.token is not None
        self.old_tokens.add(t.token)
        t.token, t.consumer, t.expiry = None, None, 0

    def schedule(self, r: Request, due: int) -> bool:
        """A request submitted with a due time still to come waits for it; returns whether
        the mark moved earlier (the script then pushes a wake-up token, unless paused)."""
        r.due_state, r.state, r.due = r.state, "scheduled", due
        if self.sched_mark is not None and self.sched_mark <= due:
            return False
        self.sched_mark = due
        if not self.paused:
            self.wake = True
        return True

    def make_due(self, r: Request) -> None:
        """A delayed request is due (its time came, or an operator's run now): it takes the
        state it was submitted for, its tasks eligible under the usual rules."""
        assert r.state == "scheduled"
        r.state, r.due = r.due_state, 0
        r.maybe_complete()

    def scheduled(self) -> list[Request]:
        return [r for r in self.requests.values() if r.state == "scheduled"]

    def promote(self, now: int) -> int:
        """Due delayed requests become due (when the mark says one may be: it then follows the
        earliest left); then retries whose backoff is over are waiting again: highest priority
        first, at most PROMOTE_MAX per level, by due time. Every dequeue/ack call does this
        before leasing, every other script that ends in dispatch_idle() after its own effects.
        Returns the floor: the priority of a level that had PROMOTE_MAX due (nothing below it
        may be leased in that call), or -1."""
        if self.sched_mark is not None and self.sched_mark <= now:
            for r in sorted(self.scheduled(), key=lambda r: (-r.priority, r.due, r.rid)):
                if r.due <= now:
                    self.make_due(r)
            self.sched_mark = min((r.due for r in self.scheduled()), default=None)
        due: dict[int, list[tuple[int, str, Task]]] = {}
        for r in self.requests.values():
            for t in r.of_state("delayed"):
                if t.due <= now:
                    due.setdefault(r.priority, []).append((t.due, f"{r.rid}/{t.tid}", t))
        for prio in sorted(due, reverse=True):
            level = sorted(due[prio], key=lambda x: x[:2])[:PROMOTE_MAX]
            for _, _, t in level:
                t.state, t.due = "waiting", 0
            if len(level) == PROMOTE_MAX:
                return prio
        return -1

    def lease(self, r: Request, t: Task, consumer: str, now: int, lease_ms: int = 0) -> None:
        assert t.state == "waiting", f"{r.rid}/{t.tid} handed out while {t.state}"
        assert r.eligible, f"{r.rid} served while not eligible ({r.state})"
        t.state, t.consumer, t.expiry = "leased", consumer, now + (lease_ms or r.lease_ms)
        t.deliveries += 1
        t.attempts += 1
        t.token = f"{r.rid}/{t.tid}/{t.deliveries}"

    def ack(self, token: str, now: int) -> bool:
        found = self.valid(token, now)
        if not found:
            if self.holder(token) is None:  # not in `leases`: if revoked, its run is over
                self.end_revoked(token, now)
            return False
        r, t = found
        self._unlease(t)
        t.state = "done"
        self.stats["done"] += 1
        r.maybe_complete()
        return True

    def to_dead(self, r: Request, t: Task, dead_id: str) -> None:
        t.state, t.dead_id = "dead", dead_id
        self.dead_ids[dead_id] = (r.rid, t.tid)
        self.stats["failed"] += 1

    def end_lease(self, r: Request, t: Task, outcome: str, *, counts: bool = True,
                  due: int = 0, dead_id: str | None = None) -> None:
        """A lease ends without success: outcome waiting, delayed, dead or cancelled. A lease
        that does not count (release, operator release) gives its attempt back."""
        self._unlease(t)
        if not counts:
            t.attempts -= 1
        if outcome == "dead":
            assert dead_id is not None
            self.to_dead(r, t, dead_id)
        else:
            t.state, t.due = outcome, due
        r.maybe_complete()

    def revoke(self, r: Request, t: Task, to: str, now: int) -> bool:
        """An operator takes a leased task from its holder, for consumer `to` (or back to
        waiting: ""), without spending an attempt. While the lease has not expired its run may
        go on: the lease is revoked (True); else the task moves on now (False)."""
        assert t.token is not None and t.revoked is None
        token = t.token
        self.old_tokens.add(token)
        t.token, t.revoked, t.claim_to = None, token, to or None
        t.attempts -= 1
        if t.expiry >= now:
            return True
        self.end_revoked(token, now)
        return False

    def end_revoked(self, token: str, now: int) -> str | None:
        """The run of a revoked lease is over: its task moves on as the operator asked
        (cancelled if its request is being cancelled). Returns the outcome, None if `token`
        is not a revoked lease."""
        found = self.revoked(token)
        if found is None:
            return None
        r, t = found
        to = t.claim_to
        t.revoked = t.claim_to = None
        if r.state == "cancelling" or not to:
            outcome = "cancelled" if r.state == "cancelling" else "waiting"
            t.state, t.consumer, t.expiry = outcome, None, 0
        else:
            outcome = "claimed"
            t.deliveries += 1
            t.attempts += 1
            t.token, t.consumer = f"{r.rid}/{t.tid}/{t.deliveries}", to
            t.expiry = now + r.lease_ms
            # Pushed to its handoff list (as dispatch_idle() would, but whether idle or not).
            self.handed.setdefault(to, []).append(t.token)
            self.handed_ever.add(t.token)
            self.handed_ms[t.token] = r.lease_ms
        r.maybe_complete()
        return outcome

    def revoked_due(self, now: int) -> list[tuple[str, str, str]]:
        """(token, holder, outcome) of every revoked lease past its old expiry, in the
        reaper's order (expiry, token), each moved on."""
        due = sorted((t.expiry, t.revoked, t.consumer) for _, t in self.leased()
                     if t.revoked and t.expiry < now)
        out = []
        for _, token, holder in due:
            assert token is not None and holder is not None
            outcome = self.end_revoked(token, now)
            assert outcome is not None
            out.append((token, holder, outcome))
        return out

    def fail_plan(self, r: Request, t: Task, retry: bool) -> tuple[str, int]:
        """(outcome kind, base backoff ms) for a failure of a held lease."""
        if r.state == "cancelling":
            return "cancelled", 0
        if not retry or t.attempts >= r.max_attempts:
            return "dead", 0
        return "retry", min(r.backoff_ms * 2 ** (t.attempts - 1), r.backoff_max_ms)

    def reap_plan(self, now: int) -> dict[str, tuple[Request, Task, str]]:
        """token -> (request, task, outcome) for every lease past its expiry."""
        out = {}
        for r, t in self.leased():
            if t.expiry < now and not t.revoked:
                assert t.token is not None
                if r.state == "cancelling":
                    outcome = "cancelled"
                elif t.attempts >= r.max_attempts:
                    outcome = "dead"
                else:
                    outcome = "waiting"
                out[t.token] = (r, t, outcome)
        return out

    def follow_on(self, parent: Request) -> None:
        """A completed request's held follow-ups: started when it is done, cancelled when it
        is cancelled, left held when it failed (a requeue may still finish it)."""
        if parent.state == "failed":
            return
        for rid in parent.then:
            c = self.requests[rid]
            if c.state != "held":
                continue
            if parent.state == "done":
                c.state = "active"
                c.maybe_complete()
            else:
                self.cancel(c)

    def cancel(self, r: Request) -> tuple[str, int, int]:
        if r.state not in (*RUNNABLE, "held", "scheduled"):
            return r.state, 0, r.count("leased")
        r.due = 0  # out of the scheduled indexes (the mark stays where it was)
        dropped = 0
        for t in r.tasks.values():
            if t.state in ("waiting", "delayed"):
                t.state, t.due = "cancelled", 0
                dropped += 1
        r.state = "cancelling"
        r.maybe_complete()
        return r.state, dropped, r.count("leased")

    def discard(self, t: Task, dead_id: str) -> bool:
        """An operator deletes a dead letter: only while it is still that task's letter."""
        if t.state != "dead" or t.dead_id != dead_id:
            return False
        t.state, t.dead_id = "discarded", None
        return True

    def revive(self, r: Request, t: Task) -> bool:
        if t.state != "dead" or r.state in ("cancelling", "cancelled"):
            return False
        t.state, t.attempts, t.dead_id = "waiting", 0, None  # stats "failed" counts it still
        if r.state == "failed":
            r.state = "active"
            r.reopens += 1
        return True


# -- the truth, read back from Redis ----------------------------------------------------


def _sid(s: str) -> tuple[int, int]:
    ms, seq = s.split("-")
    return int(ms), int(seq)


def deadmap_key(q: Queue, rid: str) -> str:
    return f"{q.keys.base}req:{rid}:dead"


def true_task_states(
    entries: list[str], last_delivered: str, pel: list[dict[str, Any]]
) -> dict[str, tuple[str, str | None, int]]:
    """tid -> (state, consumer, deliveries), from a request's stream and consumer group.

    Retired tasks (done, or cancelled before delivery: behind the group's cursor, unacked by
    nobody) are reported as "gone"."""
    out: dict[str, tuple[str, str | None, int]] = {}
    parked = {"~waiting": "waiting", "~delayed": "delayed", "~dead": "dead"}
    for p in pel:
        tid, who, n = p["message_id"], p["consumer"], int(p["times_delivered"])
        assert tid not in out, f"{tid} twice in the PEL"
        assert tid in entries, f"pending entry {tid} is not in the stream"
        out[tid] = (parked[who], None, n) if who in parked else ("leased", who, n)
    for tid in entries:
        if tid not in out:
            undelivered = _sid(tid) > _sid(last_delivered)
            out[tid] = ("waiting", None, 0) if undelivered else ("gone", None, 0)
    return out


def check_queue(q: Queue, m: QueueModel) -> list[str]:
    """Compare Redis with the model; every difference is an AssertionError. Returns the ids
    of finished requests (the caller asks `wait()` about them)."""
    r: redis.Redis = q.redis
    k = q.keys
    reqs = list(m.requests.values())
    slots = sorted(m.slots())
    pipe = r.pipeline(transaction=False)
    pipe.zrange(k.leases, 0, -1, withscores=True)
    pipe.zrange(k.revoked, 0, -1, withscores=True)
    pipe.hgetall(k.claimto)
    pipe.zrange(k.delayed, 0, -1, withscores=True)
    pipe.hgetall(k.stats)
    pipe.zrange(k.ready, 0, -1, withscores=True)
    pipe.xrange(k.dead)
    pipe.xrange(k.events, min=m.events_after)
    prios = sorted({req.priority for req in reqs})
    for prio in prios:
        pipe.zrange(f"{k.delayed}:{prio}", 0, -1, withscores=True)
    pipe.zrange(f"{k.base}dprio", 0, -1, withscores=True)
    pipe.zrange(k.scheduled, 0, -1, withscores=True)
    for prio in prios:
        pipe.zrange(f"{k.scheduled}:{prio}", 0, -1, withscores=True)
    pipe.zrange(f"{k.base}sprio", 0, -1, withscores=True)
    for s in STATES:
        pipe.zrange(k.state_index(s), 0, -1)
    for prio, handler, tenant in slots:
        pipe.zrange(k.tenant_ready(prio, handler, tenant), 0, -1)
    for req in reqs:
        pipe.hgetall(k.request(req.rid))
        pipe.exists(k.tasks(req.rid))
        pipe.hgetall(deadmap_key(q, req.rid))
    res = iter(pipe.execute())
    leases, revoked, claimto, delayed, stats, ready, dead, events = (
        next(res) for _ in range(8))
    delayed_by_prio = {prio: next(res) for prio in prios}
    dprio = next(res)
    scheduled = next(res)
    scheduled_by_prio = {prio: next(res) for prio in prios}
    sprio = next(res)
    state_index = {s: set(next(res)) for s in STATES}
    tenant_ready = {slot: set(next(res)) for slot in slots}
    per_req = [(req, next(res), next(res), next(res)) for req in reqs]

    pipe = r.pipeline(transaction=False)
    streamed = [req for req, _, exists, _ in per_req if exists]
    for req in streamed:
        sk = k.tasks(req.rid)
        pipe.xrange(sk)
        pipe.xinfo_groups(sk)
        pipe.xpending_range(sk, "g", "-", "+", 10_000)
    res = iter(pipe.execute())
    streams = {req.rid: (next(res), next(res), next(res)) for req in streamed}

    # Lease and retry indexes: exactly the leased and delayed tasks, with their times.
    want_leases = {t.token: t.expiry for _, t in m.leased() if t.token}
    assert {mem: int(s) for mem, s in leases} == want_leases, "leases index"
    # Revoked leases (still leased to their holder, counted against the concurrency) with
    # their old expiry, and the consumer each was claimed for.
    want_revoked = {t.revoked: t.expiry for _, t in m.leased() if t.revoked}
    assert {mem: int(s) for mem, s in revoked} == want_revoked, "revoked index"
    want_claimto = {t.revoked: t.claim_to for _, t in m.leased() if t.revoked and t.claim_to}
    assert claimto == want_claimto, "claimto"
    want_delayed = {f"{req.rid}/{t.tid}": t.due for req in reqs for t in req.of_state("delayed")}
    if m.sched_mark is not None:
        want_delayed["~scheduled"] = m.sched_mark
    assert {mem: int(s) for mem, s in delayed} == want_delayed, "delayed index"
    # The same per priority (promotion walks them highest first), and the priorities that
    # have any, scored 99 - priority.
    for prio, got in delayed_by_prio.items():
        want_p = {f"{req.rid}/{t.tid}": t.due for req in reqs if req.priority == prio
                  for t in req.of_state("delayed")}
        assert {mem: int(s) for mem, s in got} == want_p, f"delayed index of priority {prio}"
    want_dprio = {str(req.priority): 99 - req.priority for req in reqs if req.count("delayed")}
    assert {mem: int(s) for mem, s in dprio} == want_dprio, "dprio index"

    # Delayed requests: exactly the scheduled ones with their due times, in the queue-wide
    # index and their priority's, and the priorities that have any, scored 99 - priority.
    sched = m.scheduled()
    assert {mem: int(s) for mem, s in scheduled} == {r.rid: r.due for r in sched}, "scheduled"
    for prio, got in scheduled_by_prio.items():
        assert {mem: int(s) for mem, s in got} == {
            r.rid: r.due for r in sched if r.priority == prio}, f"scheduled:{prio}"
    assert {mem: int(s) for mem, s in sprio} == {str(r.priority): 99 - r.priority
                                                 for r in sched}, "sprio index"
    if sched:
        assert m.sched_mark is not None and m.sched_mark <= min(r.due for r in sched), "mark"

    # Dead letter stream: exactly the dead tasks.
    want_dead = {t.dead_id: (req.rid, t.tid) for req in reqs for t in req.of_state("dead")}
    assert {eid: (f["request"], f["task"]) for eid, f in dead} == want_dead, "dead letters"

    for req, h, exists, deadmap in per_req:
        rid = req.rid
        assert h, f"request hash {rid} vanished"
        assert h["state"] == req.state, f"{rid}: state {h['state']}, model {req.state}"
        assert (int(h["priority"]), h["tenant"], int(h["concurrency"])) == (
            req.priority, req.tenant, req.concurrency)
        if req.state == "scheduled":
            assert (int(h["due_ms"]), h["due_state"]) == (req.due, req.due_state), (
                f"{rid}: due {h.get('due_ms')} {h.get('due_state')}, model {req.due} "
                f"{req.due_state}")
        if exists:
            entries_raw, groups, pel = streams[rid]
            entries = [eid for eid, _ in entries_raw]
            [group] = [g for g in groups if g["name"] == "g"]
            truth = true_task_states(entries, group["last-delivered-id"], pel)
        else:
            truth = {}
        assert set(truth) <= set(req.tasks), f"{rid}: unknown entries {set(truth) - set(req.tasks)}"
        for tid, t in req.tasks.items():
            state, consumer, deliveries = truth.get(tid, ("gone", None, 0))
            where = f"task {rid}/{tid}"
            if state == "gone":
                assert t.state in ("done", "cancelled", "discarded"), (
                    f"{where} gone from Redis, model {t.state}")
                continue
            assert state == t.state, f"{where}: Redis says {state}, model {t.state}"
            assert deliveries == t.deliveries, f"{where}: delivered {deliveries}, {t.deliveries}"
            if state == "leased":
                assert consumer == t.consumer, f"{where}: held by {consumer}, model {t.consumer}"
            if state == "dead":
                assert deadmap.get(tid) == t.dead_id, f"{where}: dead letter id"
        if not exists:
            assert req.state in TERMINAL, f"{rid}: stream gone while {req.state}"
            assert req.count("dead") == 0, f"{rid}: stream gone with dead letters"

        held = sum(1 for state, _, _ in truth.values() if state == "leased")
        assert held <= req.concurrency, f"{rid}: {held} leased, concurrency {req.concurrency}"
        counts = {s: req.count(s) for s in TASK_STATES}
        # A counter missing from the hash is 0 (submit writes only those that are not).
        counters = {f: int(h.get(f, 0)) for f in
                    ("waiting", "retry", "leased", "delayed", "done", "dead", "cancelled",
                     "discarded", "total")}
        want = {**{s: counts[s] for s in TASK_STATES}, "total": len(req.tasks),
                "retry": sum(1 for t in req.of_state("waiting") if t.deliveries)}
        assert counters == want, f"{rid}: counters {counters}, model {want}"
        assert counters["total"] == sum(counters[s] for s in TASK_STATES), f"{rid}: total"

    # Waiting totals per priority and handler, and cumulative counters.
    for prio, handler in {(req.priority, req.handler) for req in reqs}:
        # A held follow-up's or delayed request's tasks are waiting but not work that can run
        # (yet): not counted here.
        want_w = sum(req.count("waiting") for req in reqs
                     if (req.priority, req.handler) == (prio, handler)
                     and req.state not in ("held", "scheduled"))
        got_w = int(stats.get(f"w:{prio}:{handler}", 0))
        assert got_w == want_w, f"stats w:{prio}:{handler}"
    assert int(stats.get("submitted", 0)) == sum(len(req.tasks) for req in reqs), "submitted"
    assert int(stats.get("done", 0)) == m.stats["done"], "stats done"
    assert int(stats.get("failed", 0)) == m.stats["failed"], "stats failed"
    assert int(stats.get("retried", 0)) == m.stats["retried"], "stats retried"

    # Ready index: exactly the eligible requests, in their (handler, tenant) slot, slots in
    # their band.
    for prio, handler, tenant in slots:
        want_r = {req.rid for req in reqs
                  if (req.priority, req.handler, req.tenant) == (prio, handler, tenant)
                  and req.eligible}
        assert tenant_ready[(prio, handler, tenant)] == want_r, (
            f"ready requests of {prio}:{handler}:{tenant}")
    ready_slots = {mem: float(s) for mem, s in ready}
    assert set(ready_slots) == {f"{p}:{h}:{t}" for (p, h, t), v in tenant_ready.items()
                                if v}, "ready"
    for mem, score in ready_slots.items():
        assert int(score // BAND) == 99 - int(mem.split(":")[0]), f"ready band of {mem}"

    for s in STATES:
        assert state_index[s] == {req.rid for req in reqs if req.state == s}, f"state:{s}"

    # Completion once: one "completed" event per completion, reopened ones complete again.
    for eid, f in events:
        m.events_after = f"({eid}"
        m.events[(f["type"], f["request"])] += 1
        assert f["type"] != "inconsistent", f"engine reported inconsistent counters: {f}"
        if f["type"] == "completed":
            m.completed_states[f["request"]] = f["state"]
    finished = []
    for req in reqs:
        done = m.events[("completed", req.rid)]
        reopened = m.events[("reopened", req.rid)]
        assert (done, reopened) == (req.completions, req.reopens), f"{req.rid}: completions"
        assert done == reopened + (1 if req.state in TERMINAL else 0), f"{req.rid}: completed"
        if req.state in TERMINAL:
            assert m.completed_states[req.rid] == req.state, f"{req.rid}: completed as"
            finished.append(req.rid)
    return finished


def payloads_of(entries: list[tuple[str, dict[str, str]]]) -> list[tuple[str, Any]]:
    return [(eid, json.loads(f["p"])) for eid, f in entries]

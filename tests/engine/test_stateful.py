"""The engine's invariants (DESIGN.md §3) under random sequences of every operation.

A hypothesis state machine drives two queues (submit, open/add/seal, dequeue, fused
ack+dequeue, ack of live and stale leases, fail, clock, reap, extend, release, cancel,
requeue, claim, operator release; the operator actions of issue 8: pause/resume, delete of
dead letters, claim/release checked against the holder and idle time shown, reclaim of a
dead worker's leases; idle workers handed work, blocked while other steps run;
a worker serving both queues; retries of several priorities due at once; delayed requests
of issue 19, submitted with run_at or delay, made due by time or an operator's run now, or
cancelled; follow-ups, alone or created with their request in one call: submit_flow)
against a reference model (tests/engine_model.py). After every step each task's
true state is rebuilt from Redis (stream, consumer group, PEL, lease, retry and scheduled
indexes) and compared with the model: nothing lost or in two states, concurrency kept,
counters, indexes and the wake-up token true, priority respected, each completion recorded
once.
Deterministic tests below cover fair share and priority order across batches.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from core.queue import (
    FollowUp,
    InvalidInput,
    Lease,
    LeaseLost,
    NotLeased,
    Queue,
    RequestCancelled,
    RequestIdTaken,
    RequestSealed,
    StateChanged,
    UnknownRequest,
)
from core.queue.client import wait_for_any
from core.queue.models import Flow, Submitted
from core.stack.redis_server import RedisServer
from tests.conftest import FakeClock
from tests.engine_model import (
    RUNNABLE,
    QueueModel,
    Request,
    Task,
    check_queue,
    deadmap_key,
    payloads_of,
)

RIDS = ("r0", "r1", "r2", "r3")
DELAYED_RIDS = ("d0", "d1", "r0")  # delayed requests; an id in use is an idempotent submit
DELAYS = (-50, 0, 1, 50, 300, 1000, 2500, 10_000, 60_000)  # ms from now
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TENANTS = ("ta", "tb", "tc")
PRIORITIES = (10, 50, 90)
CONSUMERS = ("c0", "c1", "c2")
HANDLERS = ("echo", "echo", "resize")
# The handlers each consumer runs, as its fused calls name them ("" = any): c2 lacks "resize",
# so it must never lease one, and a "resize" task waits for c0 or c1 (issue 33).
RUNS = {"c0": "", "c1": "echo resize", "c2": "echo"}


def runs_ok(consumer: str, req: Request, runs: str | None = None) -> bool:
    """Whether `consumer`'s calls may lease `req`'s tasks (runs None: its own RUNS)."""
    names = RUNS[consumer] if runs is None else runs
    return not names or req.handler in names.split()


def idle_member(consumer: str, lease_ms: int) -> str:
    runs = RUNS[consumer]
    return f"{consumer}|{lease_ms}" + (f"|{runs}" if runs else "")
QI = st.integers(0, 1)
SUBMIT = st.fixed_dictionaries({
    "qi": QI, "rid": st.sampled_from(RIDS), "priority": st.sampled_from(PRIORITIES),
    "tenant": st.sampled_from(TENANTS), "concurrency": st.sampled_from([1, 1, 2, 3]),
    "max_attempts": st.sampled_from([1, 2, 3, 3]), "n": st.integers(0, 5),
    "lease_ms": st.sampled_from([100, 300]), "backoff_ms": st.sampled_from([0, 50, 400]),
    "backoff_max_ms": st.sampled_from([100, 2000]), "seal": st.sampled_from([True, True, False]),
    "handler": st.sampled_from(HANDLERS),
})

# Engine bugs this test found that are not fixed yet. Each has a deterministic repro at the end
# of this file, marked xfail(strict=True), so the suite turns red when the fix lands; then
# remove the name here and the machine exercises that case again (it asserts the correct
# behaviour, it only skips the calls that would hit the bug while it is listed).
KNOWN_BUGS: frozenset[str] = frozenset()
HANDOFF_FRESH_MS = 1500  # an idle registration older than this gets no handoff


@dataclass
class Blocked:
    """A worker blocked in wait_for_any() while other steps run: its BLPOP on a connection of
    its own, sent and not yet answered."""

    consumer: str
    qis: tuple[int, ...]
    conn: Any  # redis.connection.Connection
    cid: int  # its CLIENT ID


class QueueMachine(RuleBasedStateMachine):
    redis_url = ""
    known_bugs: frozenset[str] = KNOWN_BUGS

    def __init__(self) -> None:
        super().__init__()
        self.client = redis.Redis.from_url(self.redis_url, decode_responses=True)
        self.prefix = "sm" + uuid.uuid4().hex[:12]
        self.clock = FakeClock()
        self.queues = [
            Queue(self.client, f"q{i}", prefix=self.prefix, clock=self.clock) for i in range(2)
        ]
        self.models = [QueueModel(q.name) for q in self.queues]
        self.payload_seq = 0
        self.waited: dict[tuple[int, str], int] = {}
        self.eligible_before: list[set[str]] = [set(), set()]
        self.blocked: Blocked | None = None
        self.served: tuple[str, str, str] | None = None  # (consumer, list, item) it got
        self.token_taken: set[int] = set()  # queues whose wake-up token it took

    def teardown(self) -> None:
        if self.blocked:
            self._unblock()
        keys = list(self.client.scan_iter(match=f"{self.prefix}:*", count=1000))
        if keys:
            self.client.unlink(*keys)
        self.client.close()

    # -- helpers ------------------------------------------------------------------------

    @property
    def now(self) -> int:
        return self.clock.now

    def _payloads(self, rid: str, n: int) -> list[dict[str, Any]]:
        out = []
        for _ in range(n):
            self.payload_seq += 1
            out.append({"r": rid, "n": self.payload_seq})
        return out

    def _learn(self, qi: int, req: Request, payloads: list[dict[str, Any]]) -> None:
        """Stream ids of tasks just added: the model needs them to follow each task."""
        if not payloads:
            return
        tail = self.client.xrevrange(self.queues[qi].keys.tasks(req.rid), count=len(payloads))
        got = payloads_of(tail[::-1])
        assert [p for _, p in got] == payloads, "tasks stored out of order or altered"
        for tid, p in got:
            assert tid not in req.tasks
            req.tasks[tid] = Task(tid, p)

    def _dead_id(self, qi: int, rid: str, tid: str) -> str:
        did = self.client.hget(deadmap_key(self.queues[qi], rid), tid)
        assert did, f"{rid}/{tid} dead without a dead letter"
        return str(did)

    def _any_request(self) -> bool:
        return any(m.requests for m in self.models)

    def _any_task(self) -> bool:
        return any(r.tasks for m in self.models for r in m.requests.values())

    def _any_leased(self) -> bool:
        return any(m.leased() for m in self.models)

    def _pick_request(
        self, data: st.DataObject, prefer: Callable[[Request], bool] | None = None
    ) -> tuple[int, Request]:
        """Any request; mostly one for which `prefer` holds, if there is one."""
        every = [(qi, r.rid) for qi, m in enumerate(self.models) for r in m.requests.values()]
        liked = [(qi, rid) for qi, rid in every if prefer and prefer(self.models[qi].requests[rid])]
        pool = liked if liked and data.draw(st.integers(0, 3), label="preferred?") else every
        qi, rid = data.draw(st.sampled_from(pool), label="request")
        return qi, self.models[qi].requests[rid]

    def _pick_task(self, data: st.DataObject) -> tuple[int, Request, Task]:
        """Mostly a leased task (the interesting case), sometimes any task."""
        leased = [(qi, r.rid, t.tid) for qi, m in enumerate(self.models) for r, t in m.leased()]
        every = [(qi, r.rid, t.tid) for qi, m in enumerate(self.models)
                 for r in m.requests.values() for t in r.tasks.values()]
        pool = leased if leased and data.draw(st.integers(0, 3), label="any task?") else every
        qi, rid, tid = data.draw(st.sampled_from(pool), label="task")
        req = self.models[qi].requests[rid]
        return qi, req, req.tasks[tid]

    def _tokens(self, qi: int, *, stale: bool = True) -> list[str]:
        m = self.models[qi]
        live = sorted(t.token for _, t in m.leased() if t.token)
        return live + (sorted(m.old_tokens) if stale else [])

    def _token_pools(self, qi: int) -> tuple[list[str], list[str], list[str]]:
        """A queue's leases: held and where bugs hide (expiring at or just before now, or of
        a cancelled request), held (maybe expired), and no longer held."""
        m = self.models[qi]
        held = sorted((t.token, t.expiry, r.state) for r, t in m.leased() if t.token)
        hot = [tok for tok, exp, state in held
               if self.now - 1 <= exp <= self.now or state == "cancelling"]
        return hot, [tok for tok, _, _ in held], sorted(m.old_tokens)

    def _pick_token(self, data: st.DataObject) -> tuple[int, str]:
        """Mostly a lease still held, often a hot one, sometimes a stale one."""
        pools = [[(qi, tok) for tok in pool] for qi in range(2) for pool in self._token_pools(qi)]
        by_kind = dict(zip(("hot", "live", "stale"), (pools[i] + pools[i + 3] for i in range(3)),
                           strict=True))
        kinds = [k for k in ("hot", "hot", "live", "live", "stale") if by_kind[k]]
        kind = data.draw(st.sampled_from(kinds), label="kind")
        return data.draw(st.sampled_from(by_kind[kind]), label="lease")

    def _pick_tokens(self, data: st.DataObject, qi: int, high: int) -> list[str]:
        """Up to `high` leases of one queue still held (maybe a hot one), maybe a stale one."""
        hot, live, stale = self._token_pools(qi)
        out = data.draw(st.lists(st.sampled_from(live), max_size=high, unique=True)
                        if live else st.just([]), label="leases")
        if hot and data.draw(st.booleans(), label="hot too?"):
            out.append(data.draw(st.sampled_from(hot), label="hot lease"))
        if stale and data.draw(st.booleans(), label="stale too?"):
            out.append(data.draw(st.sampled_from(stale), label="stale lease"))
        return list(dict.fromkeys(out))

    def _script_start(self, qi: int) -> set[str]:
        """Before a script that ends in dispatch_idle(): the requests in the ready index (with
        the handoffs of earlier scripts applied to the model)."""
        self._discover_handoffs(qi)
        return self.models[qi].eligible()

    def _script_end(self, qi: int, before: set[str]) -> None:
        """After such a script, its own effects and promotion applied to the model: if it made
        a request eligible, it handed work to idle workers, then left the wake-up token
        exactly when work is left (a token pushed before the handoffs would reach a blocked
        idle worker ahead of its handed task); if not, the token is as it was."""
        m = self.models[qi]
        made_eligible = bool(m.eligible() - before)
        self._discover_handoffs(qi)
        if made_eligible:
            m.wake = self._token_left(m)
        self._settle_wake(qi)

    @staticmethod
    def _token_left(m: QueueModel) -> bool:
        """The wake-up token a script that offered work leaves: there exactly when work is
        left; while the queue is paused none is pushed (one already there stays if work is)."""
        return bool(m.eligible()) and (m.wake or not m.paused)

    def _wait_for_any(self, qis: tuple[int, ...], consumer: str) -> None:
        """A worker's blocking wait on the queues `qis`, in its order: the first handoff list
        holding anything gives its first task, else the first wake-up token is taken. Called
        only where something is there, so it never blocks."""
        for qi in qis:
            self._discover_handoffs(qi)
        keys = [self.queues[qi].keys.handoff(consumer) for qi in qis]
        for qi, there in zip(qis, [self.client.exists(k) for k in keys], strict=True):
            if not there:  # the list expired (real time, 10 lease times): nothing is left in it
                self.models[qi].handed[consumer] = []
        want = next(((qi, True) for qi in qis if self.models[qi].handed.get(consumer)), None)
        want = want or next(((qi, False) for qi in qis if self.models[qi].wake), None)
        got = wait_for_any([self.queues[qi] for qi in qis], 0.01, consumer=consumer)
        if want is None:
            assert got is None, f"woken by {got} with nothing handed and no token"
            return
        qi, handed = want
        m = self.models[qi]
        assert got is not None and got[0] is self.queues[qi], f"woken by {got}, want q{qi}"
        if handed:
            assert [x.lease for x in got[1]] == m.handed[consumer][:1], "handed task"
            m.handed[consumer].pop(0)
        else:
            assert got[1] == [], "a wake-up token, not a task"
            m.wake = False

    def _block(self, qis: tuple[int, ...], consumer: str) -> None:
        """`consumer` blocks as wait_for_any() does, on a connection of its own, and stays
        blocked while other steps run (nothing is there for it: the model says so)."""
        pool = self.client.connection_pool
        conn = pool.connection_class(**pool.connection_kwargs)
        conn.send_command("CLIENT", "ID")
        cid = int(conn.read_response())
        keys = [self.queues[qi].keys.handoff(consumer) for qi in qis]
        conn.send_command("BLPOP", *keys, *(self.queues[qi].keys.wake for qi in qis), 60)
        self.blocked = Blocked(consumer, qis, conn, cid)
        deadline = time.monotonic() + 5
        while "b" not in self.client.client_list(client_id=[cid])[0]["flags"]:
            assert not conn.can_read(), f"{consumer} woken at once: {conn.read_response()}"
            assert time.monotonic() < deadline, f"{consumer} did not block"
            time.sleep(0.0005)

    def _poll_blocked(self) -> None:
        """Redis serves a blocked client as soon as a script ends (before the next command):
        if it was, keep what it got for _discover_handoffs()."""
        b = self.blocked
        if b is None or "b" in self.client.client_list(client_id=[b.cid])[0]["flags"]:
            return
        reply = b.conn.read_response()
        b.conn.disconnect()
        self.blocked = None
        assert reply is not None, "the blocked wait timed out (60 s)"
        self.served = (b.consumer, reply[0], reply[1])

    def _unblock(self) -> None:
        """The blocked worker's wait times out, with nothing for it."""
        self._poll_blocked()
        b = self.blocked
        if b is None:
            return
        self.client.client_unblock(b.cid)
        assert b.conn.read_response() is None, "unblocked, yet it got something"
        b.conn.disconnect()
        self.blocked = None

    def _settle_wake(self, qi: int) -> None:
        """The wake-up token a script left, if the blocked worker took it."""
        if qi in self.token_taken:
            self.token_taken.discard(qi)
            assert self.models[qi].wake, "a blocked worker got a token no script left"
            self.models[qi].wake = False

    # -- producing ----------------------------------------------------------------------

    @initialize(first=st.lists(SUBMIT, min_size=2, max_size=4),
                delayed=st.lists(st.tuples(SUBMIT, st.sampled_from(DELAYED_RIDS),
                                           st.sampled_from(DELAYS), st.booleans()),
                                 max_size=2))
    def start(self, first: list[dict[str, Any]],
              delayed: list[tuple[dict[str, Any], str, int, bool]]) -> None:
        """Some work from the first step (some of it maybe delayed), and the refusals for an
        unknown request."""
        for args in first:
            self.submit(args)
        for args, rid, ms, at in delayed:
            self.submit_delayed(args, rid, ms, at)
        rid = "nosuch"
        for q in self.queues:
            calls: list[tuple[Any, ...]] = [(q.add, rid, [1]), (q.seal, rid), (q.cancel, rid),
                                            (q.requeue_request, rid), (q.claim, rid, "1-0", "c0"),
                                            (q.state, rid),
                                            (lambda r, q=q: q.submit_after(
                                                r, [1], request_id="child", handler="echo"), rid)]
            for fn, *args in calls:
                with pytest.raises(UnknownRequest):
                    fn(*args)
            assert not self.client.exists(q.keys.request(rid), q.keys.tasks(rid))
            assert not self.client.exists(q.keys.request("child"), q.keys.tasks("child"))

    @rule(args=SUBMIT)
    def submit(self, args: dict[str, Any], due: dict[str, Any] | None = None) -> None:
        """Sealed submit, or open (with or without first tasks); a known id is idempotent.
        With `due` (run_at or delay): a time still to come makes it a delayed request."""
        qi, rid, n, seal = args["qi"], args["rid"], args["n"], args["seal"]
        opts = {k: args[k] for k in ("priority", "tenant", "concurrency", "max_attempts",
                                     "lease_ms", "backoff_ms", "backoff_max_ms")}
        q, m = self.queues[qi], self.models[qi]
        n = max(n, 1) if seal else n
        payloads = self._payloads(rid, n)
        due = due or {}
        before = self._script_start(qi)
        handler = args.get("handler", "echo")
        if n == 0:
            res = q.open(request_id=rid, **opts, handler=handler, **due)
        else:
            res = q.submit(payloads, request_id=rid, seal=seal, **opts, handler=handler, **due)
        existing = m.requests.get(rid)
        if existing:
            assert res == Submitted(rid, False, existing.state, len(existing.tasks),
                                    existing.due if existing.state == "scheduled" else 0)
            return
        req = Request(rid, **opts, handler=handler, state="active" if seal else "open", model=m)
        m.requests[rid] = req
        self._learn(qi, req, payloads)
        due_ms = self._due_ms(due)
        if due_ms > self.now:
            # Waits for its time: no promotion, no handoff; a token if the mark moved earlier.
            m.schedule(req, due_ms)
            self._discover_handoffs(qi)
            self._settle_wake(qi)
            assert res == Submitted(rid, True, "scheduled", n, due_ms)
            return
        m.promote(self.now)  # every script ending in dispatch_idle() promotes due retries
        self._script_end(qi, before)
        assert res == Submitted(rid, True, req.state, n)

    def _due_ms(self, due: dict[str, Any]) -> int:
        """The due time a submit's run_at or delay means now (0: none)."""
        if "run_at" in due:
            return (due["run_at"] - EPOCH) // timedelta(milliseconds=1)
        if "delay" in due:
            return self.now + due["delay"] // timedelta(milliseconds=1)
        return 0

    @rule(args=SUBMIT, rid=st.sampled_from(DELAYED_RIDS), ms=st.sampled_from(DELAYS),
          at=st.booleans(), then=st.sampled_from(["", "", "run now", "cancel", "due", "due-1"]))
    def submit_delayed(self, args: dict[str, Any], rid: str, ms: int, at: bool,
                       then: str = "") -> None:
        """A delayed request: due in `ms` (delay=, on the engine's clock) or at that time
        (run_at=); 0 or a time past runs now. Its tasks wait, not eligible nor counted as
        waiting work, until a promoting script finds it due (or run now); it can be added to
        while open, sealed, cancelled; a known id is idempotent. Then maybe an operator runs
        it now or cancels it, or time moves to its due time (or 1 ms before) and a worker
        asks for work: the promotion it runs makes it due (or not yet)."""
        due = ({"run_at": EPOCH + timedelta(milliseconds=self.now + ms)} if at
               else {"delay": timedelta(milliseconds=max(ms, 0))})
        self.submit({**args, "rid": rid}, due)
        qi = args["qi"]
        req = self.models[qi].requests[rid]
        if req.state != "scheduled" or not then:
            return
        if then.startswith("due"):
            self.clock.advance(req.due - self.now - (then == "due-1"))
            self._dequeue(qi, "c0", 2, [])
            assert (req.state == "scheduled") is (then == "due-1"), "promoted at its due time"
        else:
            self._run_now_or_cancel(qi, req, then)

    @precondition(lambda self: any(m.scheduled() for m in self.models))
    @rule(data=st.data(), op=st.sampled_from(["run now", "run now", "cancel"]))
    def run_now_or_cancel(self, data: st.DataObject, op: str) -> None:
        """An operator's run now of a delayed request (its tasks eligible at once, under the
        usual priorities; a request that is not delayed is left as it is), or its cancel
        (nothing of it runs; it leaves the scheduled indexes)."""
        qi, req = self._pick_request(data, lambda r: r.state == "scheduled")
        self._run_now_or_cancel(qi, req, op)

    def _run_now_or_cancel(self, qi: int, req: Request, op: str) -> None:
        q, m = self.queues[qi], self.models[qi]
        if op == "cancel":
            self._cancel(qi, req)
            return
        if req.state != "scheduled":
            assert q.run_now(req.rid) == (req.state, False)
            return
        before = self._script_start(qi)
        m.make_due(req)
        m.promote(self.now)
        assert q.run_now(req.rid) == (req.state, True)
        self._script_end(qi, before)

    @rule(args=SUBMIT, then=SUBMIT, rid=st.sampled_from(("p0", "p1", "p2", "r0")),
          fid=st.sampled_from(("f0", "f1", "f2", "r1", "p0")),
          due=st.one_of(st.none(), st.tuples(st.sampled_from(DELAYS), st.booleans())))
    def submit_flow(self, args: dict[str, Any], then: dict[str, Any], rid: str, fid: str,
                    due: tuple[int, bool] | None) -> None:
        """A request and a follow-up held behind it in one call (submit_flow): the request as
        submit makes it (maybe delayed: `due` is ms from now, by run_at or delay), the
        follow-up as submit_after; a known request id changes nothing, and says what exists;
        a follow-up id in use (or the request's own) is refused with nothing written."""
        qi, n, seal = args["qi"], args["n"], args["seal"]
        keys = ("priority", "tenant", "concurrency", "max_attempts", "lease_ms", "backoff_ms",
                "backoff_max_ms")
        opts, fopts = {k: args[k] for k in keys}, {k: then[k] for k in keys}
        q, m = self.queues[qi], self.models[qi]
        n = max(n, 1) if seal else n
        fn = max(then["n"], 1)
        when: dict[str, Any] = {}
        if due is not None:
            ms, at = due
            when = ({"run_at": EPOCH + timedelta(milliseconds=self.now + ms)} if at
                    else {"delay": timedelta(milliseconds=max(ms, 0))})
        payloads, fpayloads = self._payloads(rid, n), self._payloads(fid, fn)

        def call() -> Flow:
            return q.submit_flow(payloads, handler=args["handler"], request_id=rid, seal=seal,
                                 then=FollowUp(fpayloads, handler=then["handler"],
                                               request_id=fid, **fopts),
                                 **opts, **when)

        if fid == rid:
            with pytest.raises(InvalidInput):
                call()
            return
        existing = m.requests.get(rid)
        if existing is None and fid in m.requests:
            with pytest.raises(RequestIdTaken):
                call()
            return  # the model is unchanged: the checks after the step see nothing written
        before = self._script_start(qi)
        res = call()
        if existing:
            f = m.requests.get(fid) if fid in existing.then else None
            assert res == Flow(
                Submitted(rid, False, existing.state, len(existing.tasks),
                          existing.due if existing.state == "scheduled" else 0),
                (Submitted(fid, False, f.state, len(f.tasks)) if f else None,))
            return
        req = Request(rid, **opts, handler=args["handler"], state="active" if seal else "open",
                      model=m)
        m.requests[rid] = req
        self._learn(qi, req, payloads)
        follow = Request(fid, **fopts, handler=then["handler"], state="held", model=m)
        m.requests[fid] = follow
        req.then.append(fid)
        self._learn(qi, follow, fpayloads)
        held = (Submitted(fid, True, "held", fn),)
        due_ms = self._due_ms(when)
        if due_ms > self.now:
            m.schedule(req, due_ms)
            self._discover_handoffs(qi)
            self._settle_wake(qi)
            assert res == Flow(Submitted(rid, True, "scheduled", n, due_ms), held)
            return
        m.promote(self.now)
        self._script_end(qi, before)
        assert res == Flow(Submitted(rid, True, req.state, n), held)

    @precondition(_any_request)
    @rule(data=st.data(), args=SUBMIT, cancel=st.booleans())
    def submit_after(self, data: st.DataObject, args: dict[str, Any], cancel: bool) -> None:
        """A follow-up ("then") of a request in any state: held until the parent completes
        (done starts it, cancelled cancels it, failed keeps it held), decided at once if the
        parent has completed; a known id is idempotent; an operator may cancel it while held."""
        qi, parent = self._pick_request(data, lambda r: True)
        rid, n = args["rid"], max(args["n"], 1)
        opts = {k: args[k] for k in ("priority", "tenant", "concurrency", "max_attempts",
                                     "lease_ms", "backoff_ms", "backoff_max_ms")}
        q, m = self.queues[qi], self.models[qi]
        payloads = self._payloads(rid, n)
        before = self._script_start(qi)
        res = q.submit_after(parent.rid, payloads, request_id=rid, **opts,
                             handler=args["handler"])
        existing = m.requests.get(rid)
        if existing:
            assert res == Submitted(rid, False, existing.state, len(existing.tasks))
            return
        req = Request(rid, **opts, handler=args["handler"], state="held", model=m)
        m.requests[rid] = req
        parent.then.append(rid)
        if parent.state == "cancelled":
            # Cancelled at once: completed with no dead letter, its stream is gone already.
            req.tasks = {f"0-{i + 1}": Task(f"0-{i + 1}", p) for i, p in enumerate(payloads)}
            m.cancel(req)
        else:
            self._learn(qi, req, payloads)
        if parent.state == "done":
            req.state = "active"
        m.promote(self.now)
        self._script_end(qi, before)
        assert res == Submitted(rid, True, req.state, n)
        if cancel and req.state == "held":
            self._cancel(qi, req)

    @precondition(_any_request)
    @rule(data=st.data(), n=st.integers(0, 3), seal=st.booleans())
    def add_and_seal(self, data: st.DataObject, n: int, seal: bool) -> None:
        """Streamed fan-out: add tasks to an open request (refused once sealed), then maybe
        seal it (sealing again changes nothing)."""
        qi, req = self._pick_request(data, lambda r: r.state == "open" or (
            r.state == "scheduled" and r.due_state == "open"))
        q = self.queues[qi]
        payloads = self._payloads(req.rid, n)
        # A delayed request not sealed yet takes tasks too: they wait for its due time.
        takes = req.state == "open" or (req.state == "scheduled" and req.due_state == "open")
        if payloads and not takes:
            with pytest.raises(RequestSealed):
                q.add(req.rid, payloads)
        elif payloads:
            before = self._script_start(qi)
            total = q.add(req.rid, payloads)
            self._learn(qi, req, payloads)
            self.models[qi].promote(self.now)
            self._script_end(qi, before)
            assert total == len(req.tasks)
        if seal:
            if req.state == "open":
                req.state = "active"
                req.maybe_complete()
            elif req.state == "scheduled":  # sealed for when it is due: active then
                req.due_state = "active"
            assert q.seal(req.rid) == req.state

    # -- consuming ----------------------------------------------------------------------

    def _dequeue(
        self, qi: int, consumer: str, count: int, acks: list[str] | None, lease_ms: int = 0,
        *, idle: bool = False,
    ) -> list[Lease]:
        q, m, now = self.queues[qi], self.models[qi], self.now
        before = self._script_start(qi)
        want_acks = [m.ack(token, now) for token in acks or []]
        member = idle_member(consumer, lease_ms)
        # Plain dequeue() names no handlers (a consumer that runs any); the fused worker call
        # names those the consumer runs.
        runs = "" if acks is None else RUNS[consumer]
        drained: list[str] = []
        if idle and count:
            m.idle.pop(member, None)  # a worker is not handed work during its own call
            # Tasks handed to it earlier and not picked up come first, renewed, if still held;
            # one an operator took from it meanwhile moves on (it never started here).
            for token in m.handed.pop(consumer, []):
                if found := m.holder(token):
                    found[1].expiry = now + m.handed_ms[token]
                    drained.append(token)
                else:
                    m.end_revoked(token, now)
        floor = m.promote(now)
        made_eligible = bool(m.eligible() - before)  # by the acks, handoffs or promotion
        if acks is None:
            leases, next_due = q.dequeue(consumer, count), None
        else:
            got_acks, leases, next_due = q.ack_and_dequeue(consumer, count, acks,
                                                           lease_ms=lease_ms, idle_handoff=idle,
                                                           runs=runs)
            assert got_acks == want_acks, "ack accepted/refused wrongly"
        # Work the caller left in `ready` may have gone to idle workers at the end of the call;
        # the model takes those leases first (the totals per request are the same either way).
        handed = self._discover_handoffs(qi, check=False, dequeue=True)
        # A priority level with more due retries than one call promotes: nothing below it.
        # Only work of the handlers the consumer runs is leased to it.
        eligible = [r for r in m.requests.values() if r.eligible and r.priority >= floor
                    and runs_ok(consumer, r, runs)]
        capacity = 0 if m.paused else sum(r.free for r in eligible)  # paused: nothing leased
        top = max((r.priority for r in eligible), default=None)
        if idle and count and not leases and not drained:
            m.idle[member] = now
        assert [x.lease for x in leases[: len(drained)]] == drained, "handed tasks first"
        every, leases = leases, leases[len(drained):]
        # Work is handed out while there is any and it is wanted (ready index true).
        assert len(leases) == min(max(count - len(drained), 0), capacity), (
            "dequeue left eligible work or over-leased")
        prios = []
        for lease in leases:
            req = m.requests[lease.request_id]
            t = req.tasks[lease.task_id]
            assert runs_ok(consumer, req, runs), f"{consumer} leased a {req.handler} task"
            m.lease(req, t, consumer, now, lease_ms)  # asserts waiting, eligible (concurrency)
            assert (lease.lease, lease.attempt, lease.payload, lease.lease_ms) == (
                t.token, t.attempts, t.payload, lease_ms or req.lease_ms)
            prios.append(req.priority)
        # Priority: highest first; nothing of priority p while a higher request could run.
        assert prios == sorted(prios, reverse=True), f"priority order {prios}"
        if prios:
            assert prios[0] == top, f"served {prios[0]} while {top} was eligible"
        for p in set(prios):
            higher = [r.rid for r in m.requests.values() if r.eligible and r.priority > p
                      and runs_ok(consumer, r, runs)]
            assert not higher, f"served priority {p} while {higher} stayed eligible"
        self._check_handoffs(qi, handed)
        if next_due is not None:
            dues = [t.due for r in m.requests.values() for t in r.of_state("delayed")]
            dues += [m.sched_mark] if m.sched_mark is not None else []
            want_due = -1 if every or not dues else max(0, min(dues) - now)
            assert next_due == want_due, "next_due_ms"
        # The wake-up token, after the handoff step: there exactly when work is left, if the
        # acks or promotion made work eligible or this call leased (it took what a token
        # announced); else as it was.
        if made_eligible or every:
            m.wake = self._token_left(m)
        self._settle_wake(qi)
        return every

    @rule(qi=QI, consumer=st.sampled_from(CONSUMERS), count=st.integers(1, 4))
    def dequeue(self, qi: int, consumer: str, count: int) -> None:
        self._dequeue(qi, consumer, count, None)

    @rule(data=st.data(), qi=QI, consumer=st.sampled_from(CONSUMERS), count=st.integers(0, 3),
          lease_ms=st.sampled_from([0, 0, 250]), twice=st.booleans(), idle=st.booleans())
    def ack_and_dequeue(self, data: st.DataObject, qi: int, consumer: str, count: int,
                        lease_ms: int, twice: bool, idle: bool) -> None:
        """The fused worker call: ack some leases (one maybe twice: the second is refused),
        then lease more, maybe for a worker-chosen time; a worker that finds nothing may
        register as idle, to be handed work that arrives while nothing else waits."""
        acks = self._pick_tokens(data, qi, 3)
        self._dequeue(qi, consumer, count, acks + acks[:1] if twice else acks, lease_ms,
                      idle=idle)

    @rule(qi=QI, consumer=st.sampled_from(CONSUMERS), idle=st.booleans(),
          fates=st.lists(st.sampled_from(["ack", "retry", "dead", "keep"]), min_size=1,
                         max_size=3))
    def work(self, qi: int, consumer: str, idle: bool, fates: list[str]) -> None:
        """A worker's turn: take a batch, then ack, fail (retry or not) or keep each task."""
        for lease, fate in zip(self._dequeue(qi, consumer, len(fates), [], idle=idle), fates,
                               strict=False):
            if fate == "ack":
                self._ack(qi, lease.lease)
            elif fate != "keep":
                self._fail(qi, lease.lease, fate == "retry")

    @precondition(lambda self: any(v for m in self.models for v in m.handed.values()))
    @rule(data=st.data(), both=st.booleans())
    def take_handoff(self, data: st.DataObject, both: bool) -> None:
        """An idle worker's blocking wait (on one queue, or on both as a worker serving both
        does) returns the first task handed to it."""
        pool = sorted((qi, c) for qi, m in enumerate(self.models) for c, v in m.handed.items()
                      if v)
        qi, consumer = data.draw(st.sampled_from(pool), label="worker")
        self._wait_for_any((qi, 1 - qi) if both else (qi,), consumer)

    @rule(qi=QI, consumer=st.sampled_from(CONSUMERS), both=st.booleans(),
          lease_ms=st.sampled_from([0, 250]))
    def block_idle_worker(self, qi: int, consumer: str, both: bool, lease_ms: int) -> None:
        """A worker (of one queue, or of both) that finds nothing registers idle and blocks on
        its handoff lists and the wake-up tokens while the next steps run: a task a script
        hands it must reach it, not a token pushed ahead of it. A token already there wakes
        it for another try. If a worker is already blocked, its wait times out instead."""
        if self.blocked is not None:
            for i in self.blocked.qis:
                self._discover_handoffs(i)
            self._unblock()
            return
        self._go_idle((qi, 1 - qi) if both else (qi,), consumer, lease_ms)

    def _go_idle(self, qis: tuple[int, ...], consumer: str, lease_ms: int) -> None:
        """A worker's turn with nothing to do: it asks each queue for a task (registering
        idle), and blocks if nothing is there for it; a token wakes it for one more try."""
        for _ in range(2):
            for i in qis:
                if self._dequeue(i, consumer, 1, [], lease_ms, idle=True):
                    return  # busy after all
            if not any(self.models[i].handed.get(consumer) or self.models[i].wake
                       for i in qis):
                self._block(qis, consumer)
                return
            self._wait_for_any(qis, consumer)  # returns at once

    @rule(data=st.data(), want=st.integers(1, 3), lease_ms=st.sampled_from([0, 250]), first=QI)
    def worker_on_both_queues(self, data: st.DataObject, want: int, lease_ms: int,
                              first: int) -> None:
        """One slot of a worker serving both queues, as core/worker/runtime.py runs it: each
        queue in turn gets its finished leases acked and the whole wanted count asked for
        (idle handoff on); the first queue that returns tasks ends the round, one that
        returns nothing leaves the count whole for the next. It stays registered idle on a
        queue that had nothing while it runs the other's tasks, so work arriving there is
        handed to it, and its next call there returns that first. After an empty round it
        takes a token if one is there, else blocks on both queues (unless one is blocked)."""
        handed = sorted({c for m in self.models for c, v in m.handed.items() if v})
        pool = handed if handed and data.draw(st.booleans(), label="handed to?") else CONSUMERS
        consumer = data.draw(st.sampled_from(pool), label="worker")
        order = (first, 1 - first)
        for qi in order:
            m = self.models[qi]
            unseen = set(m.handed.get(consumer, []))  # handed over, not picked up yet
            mine = sorted(t.token for _, t in m.leased()
                          if t.consumer == consumer and t.token and t.token not in unseen)
            acks = data.draw(st.lists(st.sampled_from(mine), max_size=3, unique=True)
                             if mine else st.just([]), label=f"acks q{qi}")
            # _dequeue asserts it is served all it may have, up to the whole count.
            if self._dequeue(qi, consumer, want, acks, lease_ms, idle=True):
                return
        member = idle_member(consumer, lease_ms)
        assert all(self.client.zscore(self.queues[qi].keys.idle, member) == self.now
                   for qi in order), "an empty round registers the worker idle on both queues"
        if any(self.models[qi].wake for qi in order):
            self._wait_for_any(order, consumer)
        elif self.blocked is None:
            self._block(order, consumer)

    @rule(data=st.data(), qi=QI, consumer=st.sampled_from(CONSUMERS), idler=st.booleans(),
          then=st.sampled_from(["", "dequeue", "reap", "release", "cancel"]))
    def retries_due_together(self, data: st.DataObject, qi: int, consumer: str,
                             idler: bool, then: str) -> None:
        """Retries of several priorities due at once: the held leases that can retry with a
        backoff fail (at two or three priorities), maybe another worker goes idle and
        blocks, then time moves to when the last is due (or 1 ms past), so the next script
        promotes them all, highest priority first, and leases or hands them out by
        priority (or a request with retries due is cancelled before they are promoted)."""
        m = self.models[qi]

        def retryable() -> dict[int, list[str]]:
            out: dict[int, list[str]] = {}
            for r, t in m.leased():
                if (r.state in RUNNABLE and r.backoff_ms and t.attempts < r.max_attempts
                        and t.expiry >= self.now and t.token):
                    out.setdefault(r.priority, []).append(t.token)
            return out

        several = data.draw(st.integers(2, 3), label="priorities")

        def could_retry() -> set[int]:
            return {r.priority for r in m.requests.values() if r.state in RUNNABLE
                    and r.backoff_ms and r.max_attempts > 1 and r.count("waiting")}

        # Requests that can retry with a backoff at two priorities at least, if ids are left.
        free = [rid for rid in RIDS if rid not in m.requests]
        for prio in [p for p in PRIORITIES if p not in could_retry() | set(retryable())]:
            if len(could_retry() | set(retryable())) >= several or not free:
                break
            self.submit({"qi": qi, "rid": free.pop(0), "priority": prio,
                         "tenant": data.draw(st.sampled_from(TENANTS), label="tenant"),
                         "concurrency": 2, "max_attempts": 3, "n": 2, "lease_ms": 300,
                         "backoff_ms": data.draw(st.sampled_from([50, 400]), label="backoff"),
                         "backoff_max_ms": 2000, "seal": True})
        if len(retryable()) < several:
            self._dequeue(qi, consumer, 6, [])
        for token in sorted(tok for toks in retryable().values() for tok in toks):
            self._fail(qi, token, True)
        if idler and self.blocked is None:
            self._go_idle((qi,), CONSUMERS[(CONSUMERS.index(consumer) + 1) % len(CONSUMERS)], 0)
        dues = [t.due for r in m.requests.values() for t in r.of_state("delayed")]
        if dues:
            self.clock.advance(max(max(dues) - self.now, 0) + data.draw(st.integers(0, 1)))
        if then == "dequeue":
            self._dequeue(qi, consumer, data.draw(st.integers(1, 4)), [])
        elif then == "reap":
            self.reap(qi)
        elif then == "release":  # of a lease nobody holds: promotion and handoffs only
            before = self._script_start(qi)
            m.promote(self.now)
            assert self.queues[qi].release(["gone/1-0/1"]) == [-1]
            self._script_end(qi, before)
        elif then == "cancel" and (due := [r for r in m.requests.values() if r.count("delayed")]):
            self._cancel(qi, data.draw(st.sampled_from(due), label="cancel"))

    @precondition(lambda self: any(m.idle or any(m.handed.values()) for m in self.models))
    @rule(data=st.data(), lease_ms=st.sampled_from([0, 250]))
    def leave_idle(self, data: st.DataObject, lease_ms: int) -> None:
        """A worker stops: it leaves the idle set and takes what was handed to it."""
        pool = sorted({(qi, member.split("|")[0]) for qi, m in enumerate(self.models)
                       for member in m.idle} |
                      {(qi, c) for qi, m in enumerate(self.models) for c, v in m.handed.items()
                       if v})
        qi, consumer = data.draw(st.sampled_from(pool), label="worker")
        m = self.models[qi]
        self._discover_handoffs(qi)
        got = [x.lease for x in self.queues[qi].leave_idle(consumer, lease_ms, RUNS[consumer])]
        m.idle.pop(idle_member(consumer, lease_ms), None)
        want = m.handed.pop(consumer, [])
        # The list expires (real time, 10 lease times) if nobody takes it: then it is empty.
        assert got in (want, []), f"handoff list of {consumer}: {got}, model {want}"

    def _discover_handoffs(
        self, qi: int, *, check: bool = True, dequeue: bool = False
    ) -> set[tuple[str, int]]:
        """Apply to the model the tasks that scripts handed to idle workers since last time:
        each must be a waiting task of an eligible request, leased to a worker registered
        idle within HANDOFF_FRESH_MS. A blocked worker must get what the last script (a
        dequeue if told so) handed it. Returns (worker, priority) of each (checked unless told
        not): only what the worker runs is handed to it."""
        q, m = self.queues[qi], self.models[qi]
        self._poll_blocked()
        woke = None
        if self.served and self.served[1] in (q.keys.wake, q.keys.handoff(self.served[0])):
            woke, self.served = self.served, None
        pipe = self.client.pipeline(transaction=False)
        for c in CONSUMERS:
            pipe.lrange(q.keys.handoff(c), 0, -1)
        handed = []
        for c, items in zip(CONSUMERS, pipe.execute(), strict=True):
            if woke and woke[1] == q.keys.handoff(c):
                items = [woke[2], *items]  # the blocked worker took it off the head
            for item in items:
                flat = json.loads(item)
                for i in range(0, len(flat), 5):
                    token, attempt, payload, _, lease_ms = flat[i : i + 5]
                    if token not in m.handed_ever:
                        m.handed_ever.add(token)
                        handed.append((c, token, int(attempt), json.loads(payload), int(lease_ms)))
        for c, token, attempt, payload, lease_ms in handed:
            rid, tid, _ = token.split("/")
            req = m.requests[rid]
            t = req.tasks[tid]
            member = (idle_member(c, lease_ms) if idle_member(c, lease_ms) in m.idle
                      else idle_member(c, 0))
            since = m.idle.pop(member, None)
            assert since is not None and since >= self.now - HANDOFF_FRESH_MS, (
                f"{token} handed to {c}, which is not (freshly) idle")
            assert runs_ok(c, req), f"a {req.handler} task handed to {c}"
            m.lease(req, t, c, self.now, lease_ms)  # asserts waiting, eligible (concurrency)
            assert (token, attempt, payload) == (t.token, t.attempts, t.payload)
            m.handed.setdefault(c, []).append(token)
            m.handed_ms[token] = lease_ms
        if woke:
            c, key, item = woke
            if key == q.keys.handoff(c):
                assert json.loads(item)[0] == m.handed[c][0], "blocked worker's handed task"
                m.handed[c].pop(0)
            else:  # a token pushed ahead of the handoff would reach the worker first
                assert c not in {hc for hc, *_ in handed} or (
                    dequeue and "dequeue-token-before-handoff" in self.known_bugs), (
                    f"blocked {c} woken by the wake-up token while a task was handed to it")
                self.token_taken.add(qi)
        prios = {(c, m.requests[token.split("/")[0]].priority) for c, token, *_ in handed}
        if check:
            self._check_handoffs(qi, prios)
        return prios

    def _check_handoffs(self, qi: int, prios: set[tuple[str, int]]) -> None:
        """Nothing of priority p was handed to an idle worker while work of a higher priority
        that it runs is left waiting after the operation."""
        m = self.models[qi]
        # While the bug is listed, only work already waiting before the operation counts.
        before = self.eligible_before[qi] if "handoff-priority" in self.known_bugs else None
        for c, p in prios:
            higher = [r.rid for r in m.requests.values() if r.eligible and r.priority > p
                      and runs_ok(c, r) and (before is None or r.rid in before)]
            assert not higher, f"priority {p} handed to an idle worker while {higher} waited"
        self.eligible_before[qi] = {r.rid for r in m.requests.values() if r.eligible}

    @precondition(lambda self: any(m.leased() or m.old_tokens for m in self.models))
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        """Ack a lease: accepted while held and unexpired; an expired lease, or one already
        acked, failed, released, reaped or claimed, is refused and changes nothing."""
        qi, token = self._pick_token(data)
        self._ack(qi, token)

    def _ack(self, qi: int, token: str) -> None:
        m = self.models[qi]
        before = self._script_start(qi)
        accepted = m.ack(token, self.now)
        m.promote(self.now)  # the ack runs the dequeue script, which promotes due retries
        if accepted:
            self.queues[qi].ack(token)
        else:
            with pytest.raises(LeaseLost):
                self.queues[qi].ack(token)
        self._script_end(qi, before)

    @precondition(lambda self: any(m.leased() or m.old_tokens for m in self.models))
    @rule(data=st.data(), retry=st.booleans())
    def fail(self, data: st.DataObject, retry: bool) -> None:
        self._fail(*self._pick_token(data), retry)

    def _fail(self, qi: int, token: str, retry: bool) -> None:
        q, m, now = self.queues[qi], self.models[qi], self.now
        found = m.valid(token, now)
        if not found:
            # Refused; but the fail of a revoked lease says its run is over: it moves on.
            revoked = m.holder(token) is None and m.revoked(token) is not None
            before = self._script_start(qi) if revoked else set()
            if revoked:
                m.end_revoked(token, now)
                m.promote(now)
            with pytest.raises(LeaseLost):
                q.fail(token, "boom", retry=retry)
            if revoked:
                self._script_end(qi, before)
            return
        before = self._script_start(qi)
        req, t = found
        kind, base = m.fail_plan(req, t, retry)
        out = q.fail(token, "boom", "Traceback", worker="w1", retry=retry)
        assert out.attempts == t.attempts
        if kind == "retry":
            m.stats["retried"] += 1
            assert base // 2 <= out.delay_ms <= base, f"backoff {out.delay_ms} for base {base}"
            kind = "delayed" if out.delay_ms > 0 else "waiting"
        assert out.outcome == kind
        dead_id = self._dead_id(qi, req.rid, t.tid) if kind == "dead" else None
        m.end_lease(req, t, kind, due=now + out.delay_ms, dead_id=dead_id)
        m.promote(now)
        self._script_end(qi, before)

    @precondition(_any_leased)
    @rule(data=st.data(), override=st.sampled_from([0, 0, 250]), beat=st.booleans())
    def extend(self, data: st.DataObject, override: int, beat: bool) -> None:
        """Renew leases (plainly or in a worker's heartbeat): a held one gets a new expiry
        (answer 2 if its request is being cancelled), a lost one -1."""
        qi = data.draw(st.sampled_from([i for i, m in enumerate(self.models) if m.leased()]))
        tokens = self._pick_tokens(data, qi, 3) or self._tokens(qi)[:1]
        m, want = self.models[qi], []
        for token in tokens:
            found = m.holder(token)  # renewed while held, even past its expiry (not reaped)
            if not found:
                want.append(-1)
                continue
            req, t = found
            t.expiry = self.now + (override or req.lease_ms)
            want.append(2 if req.state == "cancelling" else 1)
        q = self.queues[qi]
        if beat:
            assert q.heartbeat("c0", {"pid": 1}, tokens, lease_ms=override) == want
        else:
            assert q.extend(tokens, lease_ms=override) == want

    @precondition(_any_leased)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        """A worker gives leases back: waiting again (not an attempt), or cancelled."""
        qi = data.draw(st.sampled_from([i for i, m in enumerate(self.models) if m.leased()]))
        tokens = self._pick_tokens(data, qi, 3) or self._tokens(qi)[:1]
        m, want = self.models[qi], []
        before = self._script_start(qi)
        for token in tokens:
            found = m.valid(token, self.now)
            if not found:
                if m.holder(token) is None:  # a revoked lease's worker says its run stopped
                    m.end_revoked(token, self.now)
                want.append(-1)
                continue
            req, t = found
            cancelled = req.state == "cancelling"
            m.end_lease(req, t, "cancelled" if cancelled else "waiting", counts=False)
            want.append(2 if cancelled else 1)
        m.promote(self.now)
        assert self.queues[qi].release(tokens) == want
        self._script_end(qi, before)

    # -- time and recovery --------------------------------------------------------------

    @rule(data=st.data(), reap=st.sampled_from([None, None, 0, 1]))
    def advance_clock(self, data: st.DataObject, reap: int | None) -> None:
        """Move time: a fixed step, or exactly to (or just past) a lease expiry or a retry's
        due time, where off-by-one errors live; then maybe the reaper of one queue runs."""
        edges = {t.expiry - self.now + d for m in self.models for _, t in m.leased()
                 for d in (0, 1)}
        edges |= {t.due - self.now + d for m in self.models for r in m.requests.values()
                  for t in r.of_state("delayed") for d in (-1, 0)}
        edges |= {r.due - self.now + d for m in self.models for r in m.scheduled()
                  for d in (-1, 0)}
        steps = sorted(e for e in edges if e > 0)
        fixed = st.sampled_from([1, 50, 150, 600, 2000])
        at_edge = steps and data.draw(st.integers(0, 2), label="to an edge?")
        self.clock.advance(data.draw(st.sampled_from(steps) if at_edge else fixed, label="ms"))
        if reap is not None:
            self.reap(reap)

    @rule(qi=QI)
    def reap(self, qi: int) -> None:
        """Expired leases go back to waiting, or dead when out of attempts, or cancelled."""
        m = self.models[qi]
        before = self._script_start(qi)
        plan = m.reap_plan(self.now)
        want = sorted((r.rid, t.tid, t.consumer, o) for r, t, o in plan.values())
        got = sorted((x.request_id, x.task_id, x.worker, x.outcome)
                     for x in self.queues[qi].reap())
        for req, t, outcome in plan.values():
            dead_id = self._dead_id(qi, req.rid, t.tid) if outcome == "dead" else None
            m.end_lease(req, t, outcome, dead_id=dead_id)
        # Then revoked leases past their old expiry: their runs are presumed over.
        for token, holder, outcome in m.revoked_due(self.now):
            rid, tid, _ = token.split("/")
            want.append((rid, tid, holder, outcome))
        assert got == sorted(want), "reaped leases"
        m.promote(self.now)
        self._script_end(qi, before)

    # -- operating ----------------------------------------------------------------------

    @precondition(_any_request)
    @rule(data=st.data(), op=st.sampled_from(["cancel", "requeue ids", "requeue request",
                                              "delete ids", "delete ids"]))
    def operate(self, data: st.DataObject, op: str) -> None:
        """Cancel a request; requeue dead letters by id (current ones, or already requeued
        ones: skipped) or all of one request (a failed request reopens); delete dead letters
        (counted as discarded; one requeued or deleted already is skipped)."""
        if op == "delete ids":
            if any(m.dead_ids for m in self.models):
                self._delete_dead(data)
            return
        if op == "requeue ids" and any(m.dead_ids for m in self.models):
            qi = data.draw(st.sampled_from([i for i, m in enumerate(self.models) if m.dead_ids]))
            m = self.models[qi]
            ids = data.draw(st.lists(st.sampled_from(sorted(m.dead_ids)), min_size=1,
                                     max_size=3, unique=True), label="dead ids")
            requeued = 0
            before = self._script_start(qi)
            for did in ids:
                rid, tid = m.dead_ids[did]
                req = m.requests[rid]
                t = req.tasks[tid]
                requeued += t.dead_id == did and m.revive(req, t)
            m.promote(self.now)
            assert self.queues[qi].requeue(ids) == (requeued, len(ids) - requeued)
            self._script_end(qi, before)
            return
        if op == "cancel":  # most interesting with tasks in backoff, else running
            in_flight = ("delayed",) if any(
                r.count("delayed") for m in self.models for r in m.requests.values()
                if r.state in RUNNABLE) else ("leased",)
            qi, req = self._pick_request(data, lambda r: r.state in RUNNABLE and any(
                t.state in in_flight for t in r.tasks.values()))
        else:
            qi, req = self._pick_request(data, lambda r: r.count("dead") > 0)
        q, m = self.queues[qi], self.models[qi]
        if op == "cancel":
            self._cancel(qi, req)
        elif req.state in ("cancelling", "cancelled"):
            with pytest.raises(RequestCancelled):
                q.requeue_request(req.rid)
        else:
            before = self._script_start(qi)
            n = sum(m.revive(req, t) for t in req.of_state("dead"))
            m.promote(self.now)
            assert q.requeue_request(req.rid) == n
            self._script_end(qi, before)

    def _delete_dead(self, data: st.DataObject) -> None:
        """Delete: no promotion, no handoff, nothing made eligible."""
        qi = data.draw(st.sampled_from([i for i, m in enumerate(self.models) if m.dead_ids]))
        m = self.models[qi]
        ids = data.draw(st.lists(st.sampled_from(sorted(m.dead_ids)), min_size=1, max_size=3,
                                 unique=True), label="dead ids")
        deleted = 0
        for did in ids:
            rid, tid = m.dead_ids[did]
            deleted += m.discard(m.requests[rid].tasks[tid], did)
        assert self.queues[qi].delete_dead(ids) == (deleted, len(ids) - deleted)

    # Mostly resume: a queue paused for long would leave the rest of the machine idle.
    @rule(qi=QI, pause=st.sampled_from([True, False, False, False]))
    def pause_or_resume(self, qi: int, pause: bool) -> None:
        """An operator pauses a queue (nothing is leased, handed to idle workers or woken for
        until it resumes; running tasks go on) or resumes it (waiting work is offered to idle
        workers and the token left, as after a submit). A second pause or resume changes
        nothing."""
        q, m = self.queues[qi], self.models[qi]
        if pause:
            assert q.pause("op") is not m.paused
            m.paused = True
            return
        self._discover_handoffs(qi)  # of earlier scripts
        assert q.resume("op") is m.paused
        if not m.paused:
            return  # it was running: no offer
        m.paused = False
        m.promote(self.now)
        self._discover_handoffs(qi)
        m.wake = bool(m.eligible())
        self._settle_wake(qi)

    @rule(data=st.data(), qi=QI, consumer=st.sampled_from(CONSUMERS),
          dead_after=st.sampled_from([100, 400]), dead=st.booleans())
    def reclaim_worker(self, data: st.DataObject, qi: int, consumer: str, dead_after: int,
                       dead: bool) -> None:
        """A worker beats (listing what it holds here), then an operator reclaims it: refused
        while its beat is younger than its dead-after; once older, every lease it holds goes
        back to waiting (or is dropped as cancelled) without spending an attempt, and it
        leaves the registry and the idle set (each of its entries)."""
        q, m = self.queues[qi], self.models[qi]
        mine = [(r, t) for r, t in m.leased() if t.consumer == consumer]
        tasks = [{"queue": q.name, "request": r.rid, "task": t.tid} for r, t in mine]
        listed = data.draw(st.booleans(), label="heartbeat lists its tasks?")
        q.heartbeat(consumer, {"dead_after_ms": dead_after, "tasks": tasks if listed else []})
        if not dead:
            with pytest.raises(StateChanged):
                q.reclaim_worker(consumer)
            return
        self.clock.advance(dead_after)
        before = self._script_start(qi)
        handed = list(m.handed.get(consumer, []))
        # Found, in this order: listed by its beat, handed to it (its handoff list), expired
        # (any holder's: checked next), revoked (ordered as `leases` and `revoked` are).
        order = [(r.rid, t.tid) for r, t in mine] if listed else []
        order += [tuple(tok.split("/")[:2]) for tok in handed]
        every = [(t.expiry, t.token or t.revoked or "", r, t) for r, t in m.leased()]
        order += [(r.rid, t.tid) for exp, _, r, t in sorted(every, key=lambda x: x[:2])
                  if t.token and exp < self.now]
        order += [(r.rid, t.tid) for _, _, r, t in sorted(every, key=lambda x: x[:2])
                  if t.revoked]
        want = [0, 0]
        for rid, tid in dict.fromkeys(order):
            r = m.requests[rid]
            t = r.tasks[tid]
            if t.state != "leased" or t.consumer != consumer:
                continue
            if t.revoked:  # it runs nothing any more: the task moves on as the operator asked
                outcome = m.end_revoked(t.revoked, self.now)
                want[outcome == "cancelled"] += 1
                continue
            cancelled = r.state == "cancelling"
            m.end_lease(r, t, "cancelled" if cancelled else "waiting", counts=False)
            want[cancelled] += 1
        for member in [k for k in m.idle if k.startswith(f"{consumer}|")]:
            del m.idle[member]  # every idle entry of it, whatever lease length it names
        m.promote(self.now)
        assert q.reclaim_worker(consumer) == tuple(want)
        m.handed[consumer] = []  # its handoff list is gone (what was on it: released above)
        assert all(m.holder(tok) is None for tok in handed), "a handed task was not reclaimed"
        self._script_end(qi, before)
        assert self.client.zscore(q.keys.workers, consumer) is None

    def _cancel(self, qi: int, req: Request) -> None:
        """Cancel: waiting and delayed tasks dropped (out of every retry index), leased ones
        left to finish; no promotion, no handoff."""
        state, dropped, running = self.models[qi].cancel(req)
        res = self.queues[qi].cancel(req.rid)
        assert (res.state, res.dropped, res.running) == (state, dropped, running)

    @precondition(_any_task)
    @rule(data=st.data(), to=st.sampled_from(("", *CONSUMERS)),
          shown=st.sampled_from(["", "", "holder", "other", "fresh"]))
    def claim(self, data: st.DataObject, to: str, shown: str) -> None:
        """An operator takes a leased task from its holder for another consumer, or back to
        waiting (release_task); no attempt counted, the old lease void at once. While that
        lease has not expired the old run may go on: the lease is revoked and the task stays
        leased to its holder, counted against the concurrency, until the holder says its run
        stopped (release, ack or fail of it) or the reaper finds it expired; then it moves
        on (to waiting, or leased to the consumer and pushed to its handoff list). An expired
        lease moves on at once. A task that is not leased, or taken already, is refused.
        With what a page showed (`shown`: the holder, another consumer, or an idle time
        longer than the entry's), a stale page is refused (StateChanged) and nothing moves."""
        qi, req, t = self._pick_task(data)
        q, m = self.queues[qi], self.models[qi]
        if shown in ("other", "fresh"):
            other = next(c for c in CONSUMERS if c != t.consumer)
            check: dict[str, Any] = ({"expect_consumer": other} if shown == "other"
                                     else {"expect_consumer": t.consumer, "min_idle_ms": 10**9})
            with pytest.raises(StateChanged):
                q.claim(req.rid, t.tid, to or "c0", **check) if to else \
                    q.release_task(req.rid, t.tid, **check)
            return
        kw: dict[str, Any] = {"expect_consumer": t.consumer} if shown == "holder" else {}
        if t.state != "leased" or t.revoked:  # taken already: waiting for its old run to end
            with pytest.raises(NotLeased):
                q.claim(req.rid, t.tid, "c0") if to else q.release_task(req.rid, t.tid)
            return
        if to == t.consumer:
            to = CONSUMERS[(CONSUMERS.index(to) + 1) % len(CONSUMERS)]
        holder = t.consumer
        before = self._script_start(qi)
        if m.revoke(req, t, to, self.now):
            # Its run may go on: nothing moves yet (no promotion, no handoff, no token).
            assert (q.claim(req.rid, t.tid, to, **kw) if to
                    else q.release_task(req.rid, t.tid, **kw)) == holder
            return
        m.promote(self.now)  # expired: it moved on at once, as after a release
        assert (q.claim(req.rid, t.tid, to, **kw) if to
                else q.release_task(req.rid, t.tid, **kw)) == holder
        self._script_end(qi, before)

    # -- after every step ---------------------------------------------------------------

    @invariant()
    def redis_matches_model(self) -> None:
        for qi, (q, m) in enumerate(zip(self.queues, self.models, strict=True)):
            self._discover_handoffs(qi)
            idle = {k: int(v) for k, v in self.client.zrange(q.keys.idle, 0, -1, withscores=True)}
            assert idle.items() <= m.idle.items(), f"idle set {idle}, model {m.idle}"
            gone = [k for k in m.idle if k not in idle]
            # Only stale registrations leave by themselves (dropped when a handoff meets them).
            assert all(m.idle[k] < self.now - HANDOFF_FRESH_MS for k in gone), "idle set"
            m.idle = idle
            self._settle_wake(qi)
            assert self.client.llen(q.keys.wake) == m.wake, "wake-up token"
            for rid in check_queue(q, m):
                req = m.requests[rid]
                if self.waited.get((qi, rid)) != req.completions:
                    # A late waiter sees the stored completion.
                    assert q.wait(rid, timeout=0.01) == req.state
                    self.waited[(qi, rid)] = req.completions


SETTINGS = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# Passing takes ~15 s; a failure is shrunk (each try replays Redis calls), which hypothesis caps
# at 5 minutes: room for that, so the report shows the shrunk steps.
@pytest.mark.slow  # 15 s alone: 100 runs of 50 steps, each step checked against the model
@pytest.mark.timeout(600)
def test_state_machine(redis_server: RedisServer) -> None:
    machine = type("QueueMachineRun", (QueueMachine,), {"redis_url": redis_server.url})
    run_state_machine_as_test(machine, settings=SETTINGS)


# -- fair share and priority, deterministic -------------------------------------------


def test_fair_share_rotates_tenants_then_requests(queue: Queue) -> None:
    """Tenant A with 10 requests does not crowd out tenant B with one; A's requests rotate."""
    a = [queue.submit([{"i": i} for i in range(20)], request_id=f"a{j}", tenant="A",
                      handler="echo").request_id
         for j in range(10)]
    queue.submit([{"i": i} for i in range(20)], request_id="b0", tenant="B", handler="echo")
    got = [queue.dequeue("w1", 1)[0].request_id for _ in range(20)]
    tenants = ["B" if rid == "b0" else "A" for rid in got]
    assert Counter(tenants) == {"A": 10, "B": 10}
    assert all(x != y for x, y in itertools.pairwise(tenants)), tenants
    served_a = [rid for rid in got if rid != "b0"]
    assert sorted(served_a) == sorted(a), "an A request got a second task before all got one"


@pytest.mark.parametrize("batch", [1, 3, 4, 10])
def test_higher_priority_drains_first(queue: Queue, batch: int) -> None:
    low = queue.submit([{"i": i} for i in range(7)], request_id="low", priority=10, handler="echo")
    high = queue.submit([{"i": i} for i in range(7)], request_id="high", priority=90,
                        handler="echo")
    order = []
    while leases := queue.dequeue("w1", batch):
        order += [x.request_id for x in leases]
    assert order == [high.request_id] * 7 + [low.request_id] * 7


# -- engine bugs found by the machine: minimal repros -----------------------------------


def test_refused_ack_is_not_counted_done(queue: Queue) -> None:
    """Fixed in c92eef7: dequeue.lua added every ack, refused ones too, to stats "done"."""
    queue.submit([1], request_id="r", handler="echo")
    [lease] = queue.dequeue("w1")
    queue.ack(lease)
    with pytest.raises(LeaseLost):
        queue.ack(lease)
    assert queue.redis.hget(queue.keys.stats, "done") == "1"


def test_requeue_and_claim_on_a_finished_request(queue: Queue) -> None:
    """Fixed in 2b9e4a5: its stream is deleted, and XPENDING on it raised NOGROUP."""
    queue.submit([1], request_id="r", handler="echo")
    lease = queue.dequeue("w1")[0]
    queue.ack(lease)
    assert queue.state("r") == "done"
    assert queue.requeue_request("r") == 0
    with pytest.raises(NotLeased):
        queue.claim("r", lease.task_id, "w2")
    with pytest.raises(NotLeased):
        queue.release_task("r", lease.task_id)


def test_idle_worker_is_not_handed_lower_priority_work(queue: Queue, clock: FakeClock) -> None:
    """Fixed in 83bda34: a handoff ran as each request became eligible inside a script, so a
    reap (or batched ack, release, requeue) handed an idle worker the low-priority task it
    met first while a high-priority one became eligible later in the same script."""
    queue.submit([1], request_id="a-low", priority=10, lease_ms=100, handler="echo")
    queue.submit([1], request_id="b-high", priority=90, lease_ms=100, handler="echo")
    assert len(queue.dequeue("w1", 2)) == 2
    assert queue.ack_and_dequeue("w2", 1, idle_handoff=True)[1] == []  # w2 idle
    clock.advance(101)
    queue.reap()  # both leases expire in one call; a-low's is processed first
    handed = [x.request_id for x in queue.leave_idle("w2")]
    assert handed in ([], ["b-high"]), f"w2 got {handed} while b-high waited"


def test_a_blocked_idle_worker_gets_what_a_dequeue_hands_it_not_a_token(
    queue: Queue, redis_client: redis.Redis, clock: FakeClock, wait_until: Any
) -> None:
    """Fixed in b5f8aeb (was "dequeue-token-before-handoff", found by the machine): dequeue.lua
    pushed the wake-up token when work was left after its own leases, before dispatch_idle()
    handed work to idle workers. Redis serves a blocked BLPOP from the list pushed to first,
    so an idle worker handed a task by a dequeue (whose acks or promotion made work eligible)
    was woken by the token instead, its handed task left on the list, unrenewed, until its
    next dequeue."""
    queue.submit([1, 2, 3], request_id="r", concurrency=3, backoff_ms=1000, max_attempts=3,
                 handler="echo")
    for lease in queue.dequeue("w1", 3):
        assert queue.fail(lease, "boom").outcome == "delayed"
    assert queue.ack_and_dequeue("w2", 1, idle_handoff=True)[1] == []  # w2 idle
    clock.advance(1000)  # all three retries due
    woken: list[Any] = []
    blocked = threading.Thread(target=lambda: woken.append(wait_for_any([queue], 5.0, "w2")))
    blocked.start()
    wait_until(lambda: any(c.get("cmd") == "blpop" for c in redis_client.client_list()),
               what="the worker to block")
    # Promotes three: one to w1, one handed to w2, one left for whoever wakes next.
    assert len(queue.dequeue("w1", 1)) == 1
    blocked.join(5)
    assert woken and woken[0] is not None and len(woken[0][1]) == 1, f"w2 got {woken}"
    assert redis_client.llen(queue.keys.wake) == 1  # the rest is for another worker

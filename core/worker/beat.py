"""Lease renewal: in a small child process by default, so a handler that holds the
interpreter (native code that keeps the GIL) cannot stop its own worker's heartbeat.

The worker tells the child which leases it holds (before it runs them) and, every beat, the
whole set; the child renews them and reports each result back, which the worker applies to
its tasks (cancelled, lease lost, renewed until when). The child also enforces the hard time
limit: a task past it is failed (retried or dead-lettered) and no longer renewed. The child
exits when its pipe closes, i.e. when the worker process ends, however it ends.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import struct
import threading
import time
from collections.abc import Callable
from pickle import HIGHEST_PROTOCOL
from typing import Any

from core.queue import LeaseLost, Queue, RedisReplyError, RedisUnavailable
from core.queue.connect import client_from_spec

from .context import TaskContext
from .outage import Outage

log = logging.getLogger("queueadmin.worker")

READY_TIMEOUT_S = 60.0
# While the worker sends holds, the child reads them every DRAIN_S instead of waiting on the
# pipe: a write that wakes a process blocked on it cost the sending slot ~30 us on this
# virtual machine (the wake-up of an idle CPU), in front of every task it starts. After
# BUSY_S without a message the child waits on the pipe again, so an idle worker costs nothing.
DRAIN_S = 0.005
BUSY_S = 0.25
# The child beats as the worker's sync arrives (every interval), with the set of leases held
# at that moment. Beating on a timer of its own instead renewed every lease held since the
# last sync: at 50,000 no-op tasks/s, up to 100,000 finished ones a beat, 0.6 Redis ZSCOREs
# per task, and their refusals applied back in the worker, holding its interpreter. Its timer,
# SYNC_SLACK intervals after its last beat, is the fallback when no sync comes (a handler
# holds the worker's interpreter): then it renews what the syncs and holds told it.
SYNC_SLACK = 1.25
# Applies one renewal result to a held task: (queue name, token, result, sent_at monotonic).
Apply = Callable[[str, str, int, float], None]
Snapshot = Callable[[], dict[str, list[TaskContext]]]  # Held.snapshot: the leases held now


def time_limit_error(limit: float, worker: str) -> str:
    return (f"TimeLimitExceeded: the task ran longer than its hard time limit of {limit:g}s "
            f"on worker {worker}; it was failed and its run abandoned")


class Beater:
    """What both ways of renewing share: whose leases, how long, where results go."""

    def __init__(self, *, worker: str, queues: list[Queue], lease_ms: int, ttl_ms: int,
                 apply: Apply, on_timeout: Callable[[str, str, str], None]) -> None:
        self.worker = worker
        self.queues = queues
        self.lease_ms = lease_ms
        self.ttl_ms = ttl_ms
        self.apply = apply  # one renewal's result, to the task it concerns
        self.on_timeout = on_timeout  # a task failed for running past its time limit


class ThreadBeater(Beater):
    """Renews leases from the heartbeat thread itself (tests with an injected clock, or
    --heartbeat thread): enough while handlers let the interpreter run."""

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def hold(self, queue: str, ctxs: list[TaskContext]) -> None:
        pass  # the next beat reads Held itself

    def started(self, queue: str, ctx: TaskContext, limit: float) -> None:
        pass  # the beat checks ctx.deadline (and names ctx.time_limit)

    def beat(self, snapshot: Snapshot, info: dict[str, Any]) -> None:
        held = snapshot()
        now = time.monotonic()
        for q in self.queues:
            name = q.name
            ctxs = held.get(name, [])
            for ctx in ctxs:
                if ctx.deadline is not None and now > ctx.deadline and not ctx.timed_out:
                    token = ctx.lease.lease
                    error = time_limit_error(ctx.time_limit, self.worker)
                    self.on_timeout(name, token, _fail_over_limit(q, token, error, self.worker,
                                                                  ctx.time_limit))
            sent = time.monotonic()
            results = q.heartbeat(self.worker, info, [c.lease.lease for c in ctxs],
                                  ttl_ms=self.ttl_ms, lease_ms=self.lease_ms)
            for ctx, r in zip(ctxs, results, strict=True):
                self.apply(name, ctx.lease.lease, r, sent)


def _fail_over_limit(q: Queue, token: str, error: str, worker: str, limit: float) -> str:
    """Fail a task that ran past its time limit (its run took at least `limit` seconds)."""
    try:
        return q.fail(token, error, worker=worker, duration=limit).outcome
    except LeaseLost:
        return "lost"


class ProcessBeater(Beater):
    """Renews leases from a child process; see the module docstring."""

    def __init__(self, *, interval: float, outage: Outage, **common: Any) -> None:
        super().__init__(**common)
        self.interval = interval
        self.outage = outage
        self._lock = threading.Lock()  # one message at a time through the pipe, in order
        self._conn: Any = None
        self._fd = -1
        self._proc: Any = None
        self._reader: threading.Thread | None = None
        self._broken = False

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")  # never fork a process with threads
        parent, child = ctx.Pipe()
        q0 = self.queues[0]
        self._proc = ctx.Process(
            target=_child_main, name=f"qa-beat-{self.worker}", daemon=True,
            args=(child, q0.client_spec(), q0.keys.prefix, [q.name for q in self.queues],
                  self.worker, self.lease_ms, self.ttl_ms, self.interval, os.getpid(),
                  q0.metrics),
        )
        self._proc.start()
        child.close()
        self._conn = parent
        self._fd = parent.fileno()
        # No task is taken before the child beats: on a loaded machine its start (a new
        # interpreter) can take longer than a short lease.
        if not parent.poll(READY_TIMEOUT_S) or parent.recv() != ("ready",):
            self._proc.kill()
            raise RuntimeError(f"the heartbeat process did not start within {READY_TIMEOUT_S:g}s")
        self._reader = threading.Thread(target=self._read, name="beat-reader", daemon=True)
        self._reader.start()

    def stop(self) -> None:
        if self._proc is None:
            return
        self._broken = True  # from here on a closed pipe is expected, not news
        self._send(("stop",))
        self._proc.join(5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        with self._lock:
            self._fd = -1  # hold() writes to it directly: never after the close
        self._conn.close()
        self._proc = None

    def _send(self, msg: tuple[Any, ...]) -> None:
        with self._lock:
            self._write(msg)

    def _write(self, msg: tuple[Any, ...]) -> None:
        """Send under the lock; a dead heartbeat process is logged once, never raised into a
        slot (its leases then expire and are reaped: at-least-once, nothing lost)."""
        try:
            self._conn.send(msg)
        except OSError as exc:
            self._gone(exc)

    def _gone(self, exc: OSError) -> None:
        if not self._broken:
            self._broken = True
            log.error("heartbeat process gone worker=%s (%s): leases are no longer "
                      "renewed; restart the worker", self.worker, exc)

    def hold(self, queue: str, ctxs: list[TaskContext]) -> None:
        """Before these tasks run: the child renews them from its next beat on. The hot path
        of a task's start: written straight to the pipe's descriptor, framed as
        Connection.send() frames a message (a 4-byte length, then the pickle), which costs a
        third of going through send()."""
        data = pickle.dumps(("hold", queue, [c.lease.lease for c in ctxs]), HIGHEST_PROTOCOL)
        frame = memoryview(struct.pack("!i", len(data)) + data)  # at most 1,000 leases
        with self._lock:
            if self._fd < 0:  # stopped: the descriptor is closed, its number maybe reused
                return
            try:
                while frame:
                    frame = frame[os.write(self._fd, frame):]
            except OSError as exc:
                self._gone(exc)

    def started(self, queue: str, ctx: TaskContext, limit: float) -> None:
        self._send(("limit", queue, ctx.lease.lease, time.monotonic() + limit, limit))

    def beat(self, snapshot: Snapshot, info: dict[str, Any]) -> None:
        """Every interval: the whole set, so the child forgets tasks that are finished. The
        set is read under the lock that hold() and started() send under: a task is added to
        Held before its hold is sent, so a sync never goes after a task's hold or time limit
        without it (which made the child drop both: the lease unrenewed, the limit lost)."""
        with self._lock:
            tokens = {q: [c.lease.lease for c in ctxs] for q, ctxs in snapshot().items()}
            self._write(("sync", tokens, info))

    def _read(self) -> None:
        while True:
            try:
                msg = self._conn.recv()
            except (EOFError, OSError):
                return
            kind = msg[0]
            if kind == "beat":
                _, sent, queue, pairs = msg
                for token, r in pairs:
                    self.apply(queue, token, r, sent)
                self.outage.recovered("heartbeat")
            elif kind == "timeout":
                self.on_timeout(msg[1], msg[2], msg[3])
            elif kind == "outage":
                self.outage.failed("heartbeat", RedisUnavailable(msg[1]))


class _ChildState:
    """What the heartbeat process knows: the leases held per queue, their time limits, and
    the worker's info for its registry entry."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.held: dict[str, set[str]] = {n: set() for n in names}
        self.limits: dict[tuple[str, str], tuple[float, float]] = {}  # -> (deadline, limit)
        self.info: dict[str, Any] = {}

    def apply(self, msg: tuple[Any, ...]) -> bool:
        """One message from the worker; False when it says stop."""
        kind: str = msg[0]
        if kind == "hold":
            self.held[msg[1]].update(msg[2])
        elif kind == "limit":
            self.limits[(msg[1], msg[2])] = (msg[3], msg[4])
        elif kind == "sync":
            for name in self.names:
                self.held[name] = set(msg[1].get(name, ()))
            self.limits = {k: v for k, v in self.limits.items() if k[1] in self.held[k[0]]}
            self.info = msg[2]
        return kind != "stop"

    def beat(self, conn: Any, queues: dict[str, Queue], worker: str, now: float,
             lease_ms: int, ttl_ms: int) -> None:
        """Fail the tasks past their time limit, then renew the rest and the worker's entry
        in each queue, telling the worker each result."""
        for (name, token), (deadline, limit) in list(self.limits.items()):
            if now > deadline:
                self.held[name].discard(token)
                del self.limits[(name, token)]
                outcome = _fail_over_limit(queues[name], token,
                                           time_limit_error(limit, worker), worker, limit)
                conn.send(("timeout", name, token, outcome))
        for name, q in queues.items():
            tokens = sorted(self.held[name])
            sent = time.monotonic()
            results = q.heartbeat(worker, self.info, tokens, ttl_ms=ttl_ms, lease_ms=lease_ms)
            self.held[name].difference_update(t for t, r in zip(tokens, results, strict=True)
                                              if r == -1)
            conn.send(("beat", sent, name, list(zip(tokens, results, strict=True))))


def _child_main(conn: Any, spec: tuple[Any, ...], prefix: str, names: list[str], worker: str,
                lease_ms: int, ttl_ms: int, interval: float, parent_pid: int,
                metrics: bool = True) -> None:
    """The heartbeat process: renew what the worker holds until the worker is gone."""
    client = client_from_spec(spec)
    queues = {n: Queue(client, n, prefix=prefix, metrics=metrics) for n in names}
    conn.send(("ready",))
    state = _ChildState(names)
    next_beat = 0.0
    last_msg = -BUSY_S
    while os.getppid() == parent_pid:
        now = time.monotonic()
        wait = max(0.0, min(next_beat - now, 1.0))
        if now - last_msg < BUSY_S:  # holds are coming: read them between naps (DRAIN_S)
            if wait and not conn.poll(0):
                time.sleep(min(wait, DRAIN_S))
            wait = 0.0
        if conn.poll(wait):
            try:
                msg = conn.recv()
            except EOFError:
                return  # the worker is gone
            if msg[0] == "hold":
                last_msg = time.monotonic()
            elif msg[0] == "sync":
                next_beat = 0.0  # beat now, with the leases the worker holds now
            if not state.apply(msg):
                return
            continue
        now = time.monotonic()
        if now < next_beat:
            continue
        try:
            state.beat(conn, queues, worker, now, lease_ms, ttl_ms)
            # The worker's sync comes every interval and the beat follows it; the timer is
            # the fallback for a worker whose interpreter a handler holds (see SYNC_SLACK).
            next_beat = now + interval * SYNC_SLACK
        except (RedisUnavailable, RedisReplyError) as exc:
            conn.send(("outage", str(exc)))
            next_beat = now + min(interval, 0.5)
        except (BrokenPipeError, EOFError):
            return

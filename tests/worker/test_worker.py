"""The worker runtime in-process: core.worker.Worker run in a thread against the suite's Redis.

Handlers are plain closures in a Registry of the test's own, so a test sees exactly what ran.
(In a thread, Worker.run() installs no signal handlers; tests stop it with worker.stop().)
"""

from __future__ import annotations

import itertools
import logging
import re
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from core.queue import Queue, read
from core.stack.redis_server import start_redis
from core.worker import (
    Cancelled,
    Permanent,
    Registry,
    TaskContext,
    Unavailable,
    Worker,
    WorkerConfig,
)
from core.worker.heartbeat import Heartbeat
from core.worker.held import Held
from core.worker.outage import Outage


class Running:
    """A Worker running in a thread; `exit_code` is set when run() returns."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.exit_code: int | None = None
        self.thread = threading.Thread(target=self._run, name=f"test-{worker.name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.exit_code = self.worker.run()

    def join(self, timeout: float) -> bool:
        """True if the worker stopped by itself within `timeout` seconds."""
        self.thread.join(timeout)
        return not self.thread.is_alive()


@pytest.fixture
def start() -> Iterator[Any]:
    """start(queue, registry, **config) -> Running; workers still running at teardown are
    stopped hard and joined, so no thread outlives its test."""
    running: list[Running] = []

    def make(queue: Queue, registry: Registry, **config: Any) -> Running:
        config.setdefault("dead_after", 1.0)
        r = Running(Worker([queue], WorkerConfig(**config), registry))
        running.append(r)
        return r

    yield make
    for r in running:
        r.worker.stop(hard=True)
        r.join(10)


def events(queue: Queue, kind: str) -> list[dict[str, str]]:
    return [f for _, f in queue.redis.xrange(queue.keys.events) if f["type"] == kind]


def test_burst_runs_everything_then_exits(live_queue: Queue, start: Any) -> None:
    ran: list[int] = []
    registry = Registry()
    registry.register("rec", lambda payload, ctx: ran.append(payload))
    live_queue.submit(list(range(50)), request_id="r", handler="rec")
    w = start(live_queue, registry, name="burst", burst=True)
    assert w.join(10), "a burst worker must exit once the queue is drained"
    assert w.exit_code == 0
    assert sorted(ran) == list(range(50))
    assert live_queue.wait("r", timeout=0) == "done"
    assert w.worker.processed == 50 and w.worker.failed == 0
    assert read.workers(live_queue).items == []  # unregistered on the way out


def test_burst_waits_for_a_dead_consumers_leases_and_recovers_them(
    live_queue: Queue, start: Any
) -> None:
    ran: list[str] = []
    registry = Registry()
    registry.register("rec", lambda payload, ctx: ran.append(payload))
    live_queue.submit(["a", "b"], request_id="r", handler="rec", lease_ms=300)
    ghost = live_queue.dequeue("ghost", 2)  # leased to a consumer that never comes back
    assert len(ghost) == 2
    w = start(live_queue, registry, name="burst", burst=True)
    assert w.join(10), "the burst worker should reap the ghost's leases, run them and exit"
    assert sorted(ran) == ["a", "b"]
    assert live_queue.wait("r", timeout=0) == "done"
    reaped = events(live_queue, "reaped")
    assert sorted((e["worker"], e["outcome"]) for e in reaped) == [("ghost", "waiting")] * 2
    assert live_queue.ack_many(ghost) == [False, False]  # the ghost's late acks are refused


def test_cancel_reaches_a_running_task_which_is_released_not_failed(
    live_queue: Queue, start: Any, wait_until: Any
) -> None:
    started = threading.Event()
    stopped_after: list[float] = []
    calls: list[str] = []

    def slow(payload: Any, ctx: TaskContext) -> None:
        calls.append(ctx.task_id)
        started.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                ctx.check()
            except Cancelled:
                stopped_after.append(time.monotonic())
                raise
            time.sleep(0.01)

    registry = Registry()
    registry.register("slow", slow)
    live_queue.submit([1, 2, 3], request_id="r", handler="slow", concurrency=1)
    w = start(live_queue, registry, name="w", dead_after=0.5)
    assert started.wait(5)
    cancelled_at = time.monotonic()
    result = live_queue.cancel("r")
    assert (result.dropped, result.running) == (2, 1)
    assert live_queue.wait("r", timeout=5) == "cancelled"
    assert stopped_after and stopped_after[0] - cancelled_at < 1.0  # a beat, not the 10 s
    info = read.request(live_queue, "r")
    assert info is not None and (info.cancelled, info.dead, info.done) == (3, 0, 0)
    assert read.dead_letters(live_queue) == []
    assert len(calls) == 1  # released as cancelled, not run again
    assert w.worker.failed == 0
    w.worker.stop()
    assert w.join(5) and w.exit_code == 0


def test_a_task_whose_handler_the_worker_lacks_is_never_leased_to_it_and_waits(
    live_queue: Queue, start: Any
) -> None:
    """Issue 33: it used to be leased and dead-lettered at once ("no handler named ...")."""
    registry = Registry()
    registry.register("known", lambda payload, ctx: None)
    live_queue.submit([1], request_id="r", handler="nosuch", max_attempts=5)
    live_queue.submit([1], request_id="k", handler="known")
    w = start(live_queue, registry, name="w", burst=True)
    assert w.join(10)  # drained of what it runs
    assert live_queue.wait("k", timeout=0) == "done"
    assert read.dead_letters(live_queue) == []
    info = read.request(live_queue, "r")
    assert info is not None and (info.waiting, info.leased, info.dead) == (1, 0, 0)
    assert read.stats(live_queue).unrunnable == {"nosuch": 1}


def test_a_task_handed_to_a_worker_without_its_handler_goes_back_unspent(
    live_queue: Queue, start: Any
) -> None:
    """An operator's claim gives a task to a named consumer; one that does not run its
    handler gives it back, no attempt spent (a worker that announced its handlers is refused
    such a claim in the first place: test_engine_handlers)."""
    registry = Registry()
    registry.register("known", lambda payload, ctx: None)
    live_queue.submit([1], request_id="r", handler="nosuch", max_attempts=1)
    (lease,) = live_queue.dequeue("holder", 1)
    live_queue.claim("r", lease.task_id, "w")
    live_queue.release([lease])  # the holder's run stopped: the task is w's (its handoff)
    w = start(live_queue, registry, name="w", burst=True)
    assert w.join(15)
    assert read.dead_letters(live_queue) == []
    info = read.request(live_queue, "r")
    assert info is not None and (info.waiting, info.leased, info.dead) == (1, 0, 0)


def test_a_failing_handler_is_retried_with_backoff_then_dead_lettered_with_its_traceback(
    live_queue: Queue, start: Any
) -> None:
    calls: list[tuple[int, float]] = []

    def explode(payload: Any, ctx: TaskContext) -> None:
        calls.append((ctx.attempt, time.monotonic()))
        raise ValueError(f"cannot parse {payload!r}")

    registry = Registry()
    registry.register("explode", explode)
    live_queue.submit(["x7"], request_id="r", handler="explode", max_attempts=3,
                      backoff_ms=200, backoff_max_ms=10_000)
    w = start(live_queue, registry, name="w", burst=True)
    assert w.join(10)
    assert [a for a, _ in calls] == [1, 2, 3]
    # Backoff 200 ms * 2^(attempt-1), jittered down to half: at least 100 ms, then 200 ms.
    gaps = [b - a for (_, a), (_, b) in itertools.pairwise(calls)]
    assert gaps[0] >= 0.095 and gaps[1] >= 0.195, gaps
    assert live_queue.wait("r", timeout=0) == "failed"
    (dead,) = read.dead_letters(live_queue)
    assert dead.error == "ValueError: cannot parse 'x7'"
    assert dead.attempts == 3
    assert "in explode" in dead.traceback and "raise ValueError" in dead.traceback
    assert w.worker.failed == 3


def test_a_permanent_failure_is_dead_lettered_at_once_with_attempts_left(
    live_queue: Queue, start: Any
) -> None:
    class BadInput(ValueError):
        permanent = True  # as core.worker.Permanent: a retry cannot fix it

    calls: list[int] = []

    def refuse(payload: Any, ctx: TaskContext) -> None:
        calls.append(ctx.attempt)
        if payload == "typed":
            raise Permanent("this input can never be processed")
        raise BadInput("no such column")

    registry = Registry()
    registry.register("refuse", refuse)
    live_queue.submit(["typed", "attr"], request_id="r", handler="refuse", max_attempts=5,
                      backoff_ms=100)
    w = start(live_queue, registry, name="w", burst=True)
    assert w.join(10)
    assert calls == [1, 1]
    assert live_queue.wait("r", timeout=0) == "failed"
    errors = sorted(d.error for d in read.dead_letters(live_queue))
    assert errors == ["BadInput: no such column",
                      "Permanent: this input can never be processed"]
    assert all(d.attempts == 1 for d in read.dead_letters(live_queue))


def test_max_tasks_stops_the_worker_after_that_many(live_queue: Queue, start: Any) -> None:
    ran: list[int] = []
    registry = Registry()
    registry.register("rec", lambda payload, ctx: ran.append(payload))
    live_queue.submit(list(range(10)), request_id="r", handler="rec")
    w = start(live_queue, registry, name="w", max_tasks=3)
    assert w.join(10), "the worker should stop by itself after 3 tasks"
    assert w.exit_code == 0
    assert ran == [0, 1, 2]
    info = read.request(live_queue, "r")
    # Nothing is left leased (hoarded) by the stopped worker.
    assert info is not None and (info.done, info.leased, info.waiting) == (3, 0, 7)


def test_a_redis_outage_in_the_heartbeat_is_logged_once_not_as_a_stream_of_tracebacks(
    tmp_path: Path, prefix: str, caplog: pytest.LogCaptureFixture, wait_until: Any
) -> None:
    # The reaper lock was once taken with a raw redis-py SET: an outage meeting the reap first
    # came out as a "heartbeat error" traceback every 50 ms until the next beat.
    server = start_redis(tmp_path / "redis", appendonly=False)
    hb: Heartbeat | None = None
    try:
        q = Queue(redis.Redis.from_url(server.url, decode_responses=True), "q", prefix=prefix)
        outage = Outage()
        # As a worker with --dead-after 6 builds it: beat every 1.2 s, reap every 1 s, so
        # the reap at 1 s is the first call to meet the outage.
        hb = Heartbeat(worker="w", queues=[q], held=Held(), lease_ms=6000, interval=1.2,
                       reap_interval=1.0, info=dict, outage=outage, process=False)
        caplog.set_level(logging.INFO, logger="queueadmin.worker")
        hb.start()
        # The first round beats, takes the reaper lock (1 s) and reaps; once the lock is
        # 100 ms old that round is over, and Redis goes away before the next reap.
        wait_until(lambda: 0 < q.redis.pttl(q.keys.reaper_lock) < 900, 5, "the first reap")
        server.stop(sig=signal.SIGKILL)
        wait_until(lambda: outage.down, 5, "the heartbeat to notice the outage")
    finally:
        if hb is not None:
            hb.stop()
            hb.join(5)
        server.stop(sig=signal.SIGKILL)
    messages = [r.getMessage() for r in caplog.records if r.name == "queueadmin.worker"]
    assert [m for m in messages if m.startswith("heartbeat error")] == []
    # This heartbeat's own (a worker thread an earlier test left in this process may log its
    # own outage of another server: "Redis unavailable (idle wait)", seen in a whole run).
    assert len([m for m in messages if m.startswith("Redis unavailable (heartbeat)")]) == 1


class CountingQueue(Queue):
    """A queue that counts its heartbeat calls (each one a round trip, or an attempt at one)."""

    beats = 0

    def heartbeat(self, *args: Any, **kwargs: Any) -> list[int]:
        self.beats += 1
        return super().heartbeat(*args, **kwargs)


def test_the_heartbeat_backs_off_while_redis_is_down(
    tmp_path: Path, prefix: str, wait_until: Any
) -> None:
    server = start_redis(tmp_path / "redis", appendonly=False)
    hb: Heartbeat | None = None
    try:
        q = CountingQueue(redis.Redis.from_url(server.url, decode_responses=True), "q",
                          prefix=prefix)
        outage = Outage()
        hb = Heartbeat(worker="w", queues=[q], held=Held(), lease_ms=2000, interval=0.4,
                       reap_interval=1.0, info=dict, outage=outage, process=False)
        hb.start()
        wait_until(lambda: q.beats, 5, "the first beat")
        server.stop(sig=signal.SIGKILL)
        wait_until(lambda: outage.down, 5, "the heartbeat to notice the outage")
        before = q.beats
        time.sleep(1.0)  # the window in which retries are counted
        retries = q.beats - before
    finally:
        if hb is not None:
            hb.stop()
            hb.join(5)
        server.stop(sig=signal.SIGKILL)
    # Backing off from 0.1 s and doubling: retries after 0.1, 0.3 and 0.7 s.
    assert retries <= 5, f"{retries} heartbeat attempts in 1 s of outage"
    # One thread retrying must not push another thread's backoff up: each has its own.
    other: list[float] = []
    t = threading.Thread(target=lambda: other.append(outage.failed("slot", OSError("down"))))
    t.start()
    t.join()
    assert other == [outage.first]


BUSY_SCRIPT = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat
  local n = redis.call('TIME')
until n[1] * 1000000 + n[2] - start > tonumber(ARGV[1])
return 1
"""


def test_max_tasks_holds_across_slots_when_redis_is_slow_to_answer(
    live_queue: Queue, start: Any, redis_server: Any, wait_until: Any
) -> None:
    ran: list[int] = []

    def work(payload: Any, ctx: TaskContext) -> None:
        ran.append(payload)
        time.sleep(0.2)

    registry = Registry()
    registry.register("work", work)
    live_queue.submit(list(range(20)), request_id="r", handler="work")
    probe = redis.Redis.from_url(redis_server.url, socket_timeout=0.1)
    probe.ping()
    # Redis answers slowly (busy 0.5 s with a script): every slot's first call waits on it.
    busy = threading.Thread(target=lambda: live_queue.redis.eval(BUSY_SCRIPT, 0, 500_000))
    busy.start()

    def redis_is_busy() -> bool:
        try:
            probe.ping()
        except redis.TimeoutError:
            return True
        return False

    wait_until(redis_is_busy, 5, "the busy script to start")
    w = start(live_queue, registry, name="w", slots=8, max_tasks=1)
    busy.join(5)
    assert w.join(10)
    probe.close()
    assert len(ran) == 1, f"--max-tasks 1 ran {len(ran)} tasks"
    info = read.request(live_queue, "r")
    assert info is not None and (info.done, info.leased) == (1, 0)


def test_a_worker_takes_no_task_before_its_handlers_are_ready(
    live_queue: Queue, start: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A handler's readiness check (its Spark server, say) holds the worker's first lease:
    meanwhile another worker could run the task, and this one's heartbeat says why it waits."""
    ready = threading.Event()
    ran: list[str] = []
    registry = Registry()
    registry.register("rec", lambda payload, ctx: ran.append(payload),
                      ready=lambda: None if ready.is_set() else "the test's server is down")
    live_queue.submit(["a"], request_id="r", handler="rec")
    caplog.set_level(logging.INFO, logger="queueadmin.worker")
    start(live_queue, registry, name="waiter")
    deadline = time.monotonic() + 5
    while not read.workers(live_queue).items and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    assert ran == []
    assert read.request(live_queue, "r").leased == 0  # nothing held while it waits
    [info] = read.workers(live_queue).items
    assert info.info.get("waiting") == "the test's server is down"
    ready.set()
    assert live_queue.wait("r", timeout=10) == "done" and ran == ["a"]
    said = [r.getMessage() for r in caplog.records]
    assert any("takes no task while the test's server is down" in m for m in said), said
    assert any("waiter: takes tasks; no longer true after" in m for m in said), said


def test_waiting_at_start_is_told_quietly_until_it_lasts(
    live_queue: Queue, start: Any, caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker started beside its Spark server waits a few seconds at every stack start: that
    is said at INFO; a wait past the start-up grace is a WARNING, said once."""
    from core.worker import runtime

    monkeypatch.setattr(runtime, "STARTUP_GRACE_S", 0.6)
    ready = threading.Event()
    registry = Registry()
    registry.register("rec", lambda payload, ctx: None,
                      ready=lambda: None if ready.is_set() else "the server starts")
    caplog.set_level(logging.INFO, logger="queueadmin.worker")
    start(live_queue, registry, name="patient")

    def lines(level: int) -> list[str]:
        return [r.getMessage() for r in caplog.records
                if r.levelno == level and "worker=patient" in r.getMessage()]

    deadline = time.monotonic() + 5
    while not lines(logging.WARNING) and time.monotonic() < deadline:
        time.sleep(0.05)
    ready.set()
    assert any("takes no task while the server starts" in m for m in lines(logging.INFO))
    [warned] = lines(logging.WARNING)
    assert re.search(r"still takes no task after \d+ s while the server starts", warned), warned


def test_a_check_that_waits_only_when_asked_at_start_lets_the_worker_begin(
    live_queue: Queue, start: Any
) -> None:
    ran: list[str] = []
    registry = Registry()
    registry.register("rec", lambda payload, ctx: ran.append(payload),
                      ready=lambda: "never ready", at_start=lambda: False)
    registry.register("other", lambda payload, ctx: ran.append(payload))
    live_queue.submit(["x"], request_id="r", handler="other")
    start(live_queue, registry, name="w")
    assert live_queue.wait("r", timeout=10) == "done" and ran == ["x"]


def test_a_handler_that_finds_its_server_down_gives_the_task_back_without_an_attempt(
    live_queue: Queue, start: Any
) -> None:
    """Unavailable: the task is released (not failed, not counted as an attempt) and the
    slot waits for the handler's readiness before it takes more work."""
    up = threading.Event()
    calls: list[int] = []

    def handler(payload: Any, ctx: TaskContext) -> None:
        calls.append(ctx.attempt)
        if not up.is_set():
            raise Unavailable("the test's server went away")

    registry = Registry()
    registry.register("rec", handler, ready=lambda: None if up.is_set() else "server down",
                      at_start=lambda: False)
    live_queue.submit(["a"], request_id="r", handler="rec", max_attempts=1)
    start(live_queue, registry, name="w")
    deadline = time.monotonic() + 5
    while not calls and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.5)
    info = read.request(live_queue, "r")
    assert calls == [1] and info.waiting == 1 and info.dead == 0  # given back, not failed
    up.set()
    assert live_queue.wait("r", timeout=10) == "done"
    assert calls == [1, 1]  # the run that counted is the one that ran: still attempt 1

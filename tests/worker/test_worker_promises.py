"""Issue 6's worker defects, each reproduced: a handed task run twice, a run going on after
its lease was taken, a handler holding the GIL losing its lease, a second queue never
served, a Redis error reply killing the worker, acks held back behind a slow task."""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import core.worker.builtins  # noqa: F401  (registers noop)
import tests.handlers  # noqa: F401  (registers tracked, gil_sleep)
from core.queue import Queue, read
from core.stack.redis_server import start_redis
from core.worker import Worker, WorkerConfig, handler, runtime
from core.worker.beat import ProcessBeater, ThreadBeater
from core.worker.context import TaskContext
from core.worker.held import Held
from core.worker.outage import Outage
from tests.worker.test_worker_process import counters, events, task_log


def starts(log: list[str]) -> list[str]:
    return [line for line in log if line.startswith("start")]


def overlaps(log: list[str]) -> int:
    """Most runs in progress at once, from the start/end lines."""
    running = top = 0
    for line in log:
        running += 1 if line.startswith("start") else -1
        top = max(top, running)
    return top


@pytest.mark.slow  # 8 s alone: four tasks of 3 s, two at a time
def test_idle_workers_run_each_task_of_a_limited_request_once(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    """Was (make run, two workers, `submit '{"seconds": 12}'` x4): leased 3 of a limit of 2,
    a live worker's task recovered as if it were dead, then run twice."""
    k = f"{prefix}:t"
    spawn_worker("w1")
    spawn_worker("w2")
    wait_until(lambda: len(read.workers(live_queue).items) == 2, 20, "both workers")
    time.sleep(1.2)  # both blocked idle, registered for handoff
    live_queue.submit([{"k": k, "seconds": 3}] * 4, request_id="r", handler="tracked",
                      concurrency=2)
    assert live_queue.wait("r", timeout=30) == "done"
    log = task_log(live_queue, k)
    assert sorted(line.split()[1] for line in starts(log)) == sorted(
        {line.split()[1] for line in starts(log)}), f"a task ran twice: {log}"
    assert all(line.split()[2] == "1" for line in starts(log)), log
    assert overlaps(log) <= 2, log
    assert events(live_queue, "reaped") == []


def test_a_run_whose_lease_was_released_by_an_operator_stops(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str, tmp_path: Path
) -> None:
    """Was: the heartbeat flagged the lost lease but nothing read the flag: the old run went
    on beside the new one."""
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 30}], request_id="r", handler="tracked")
    spawn_worker("w1")
    wait_until(lambda: task_log(live_queue, k), 20, "the task to start")
    [entry] = read.pending(live_queue, "r")
    released = time.monotonic()
    assert live_queue.release_task("r", entry.task_id) == "w1"
    log = tmp_path / "w1.log"
    wait_until(lambda: "task stopped: lease lost" in log.read_text(), 5, "w1's run to stop")
    assert time.monotonic() - released < 2  # within a heartbeat (dead-after 2 / 5) or so
    wait_until(lambda: len(starts(task_log(live_queue, k))) == 2, 10, "the task to run again")
    assert not any(line.startswith("end") for line in task_log(live_queue, k))
    live_queue.cancel("r")
    assert live_queue.wait("r", timeout=10) == "cancelled"


@pytest.mark.parametrize("claim", [False, True], ids=["release", "claim"])
def test_a_task_taken_from_a_running_worker_never_runs_beside_its_old_run(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str, tmp_path: Path,
    claim: bool,
) -> None:
    """Issue 18. Was: an operator's release of a running task put it back to waiting at once
    (a claim leased it to the new consumer at once), so with concurrency 1 an idle worker
    started a task of the request while the old handler ran on. Now nothing of the request
    starts until the old run has stopped; then the task runs (on the worker it was claimed
    for). Leases last 10 s here: the old run is not presumed over while the test watches."""
    k = f"{prefix}:t"
    spawn_worker("A", "--dead-after", "10")
    live_queue.submit([{"k": k}, {"k": k}], request_id="r", handler="gated", concurrency=1)
    wait_until(lambda: task_log(live_queue, k), 30, "A to start a task")
    spawn_worker("B", "--dead-after", "10")
    spawn_worker("C", "--dead-after", "10")
    wait_until(lambda: len(read.workers(live_queue).items) == 3, 30, "B and C to start")
    wait_until(lambda: live_queue.redis.zcard(live_queue.keys.idle) >= 2, 10, "B and C idle")
    [entry] = [p for p in read.pending(live_queue, "r") if p.consumer == "A"]
    tid = entry.task_id
    if claim:
        assert live_queue.claim("r", tid, "C", expect_consumer="A") == "A"
    else:
        assert live_queue.release_task("r", tid, expect_consumer="A") == "A"
    wait_until(lambda: "lease lost" in (tmp_path / "A.log").read_text(), 10,
               "A's heartbeat to learn that its lease was taken")
    time.sleep(1)  # B and C are idle; before the fix one of them had the task by now
    assert task_log(live_queue, k) == [f"start {tid} 1 A"], "a task started beside A's run"
    live_queue.redis.set(f"{k}:gate", 1)  # A's handler reaches its check and stops
    assert live_queue.wait("r", timeout=30) == "done"
    log = task_log(live_queue, k)
    assert overlaps(log) == 1, log
    assert log[:2] == [f"start {tid} 1 A", f"gone {tid} 1 A"], log
    again = log[2].split()
    assert again[:3] == ["start", tid, "1"], log  # the same task first, no attempt spent
    if claim:
        assert again[3] == "C", log
    assert len(starts(log)) == 3, log


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


@pytest.mark.slow  # 10 s alone: a 6 s task, paused past --dead-after, then run again in full
def test_a_worker_paused_past_its_lease_does_not_go_on_beside_the_new_run(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    """SIGSTOP (worker and its heartbeat process) longer than --dead-after: the task goes to
    another worker; when the first resumes, its run stops at its next check."""
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 6}], request_id="r", handler="tracked")
    w1 = spawn_worker("w1")
    wait_until(lambda: task_log(live_queue, k), 20, "the task to start")
    paused = [w1.pid, *_children(w1.pid)]
    for pid in paused:
        subprocess.run(["kill", "-STOP", str(pid)], check=True)
    try:
        spawn_worker("w2")
        wait_until(lambda: any("w2" in x for x in task_log(live_queue, k)), 20,
                   "w2 to take the task over")
    finally:
        for pid in paused:
            subprocess.run(["kill", "-CONT", str(pid)], check=True)
    assert live_queue.wait("r", timeout=20) == "done"
    time.sleep(1)
    log = task_log(live_queue, k)
    assert not any(line.startswith("end") and line.endswith("w1") for line in log), log


@pytest.mark.slow
def test_a_handler_holding_the_gil_keeps_its_lease(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    """Was: a 20 s native call keeping the GIL with --dead-after 2 was delivered 5 times and
    dead-lettered: the heartbeat thread could not run."""
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 7}], request_id="r", handler="gil_sleep",
                      max_attempts=2)
    spawn_worker("w1")
    assert live_queue.wait("r", timeout=30) == "done"
    assert len(starts(task_log(live_queue, k))) == 1
    assert events(live_queue, "reaped") == []


@pytest.mark.slow
def test_a_task_past_its_hard_time_limit_is_failed_even_while_the_worker_is_stuck(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 60}], request_id="r", handler="gil_sleep",
                      max_attempts=1)
    spawn_worker("w1", "--time-limit", "2")
    # Timed from the handler's start, not the spawn: a worker starts slowly on a loaded machine.
    wait_until(lambda: starts(task_log(live_queue, k)), 60, "the task to start")
    started = time.monotonic()
    assert live_queue.wait("r", timeout=40) == "failed"
    assert time.monotonic() - started < 20  # the handler alone would run 60 s
    [letter] = read.dead_letters(live_queue)
    assert letter.error.startswith("TimeLimitExceeded") and "2s" in letter.error


def _run_in_thread(worker: Worker) -> threading.Thread:
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    return t


def test_a_worker_of_two_queues_serves_the_second(redis_client: redis.Redis, prefix: str) -> None:
    """Was: after the first queue returned nothing the batch size fell to 0, so `-q a -q b`
    never served b."""
    qa, qb = (Queue(redis_client, n, prefix=prefix) for n in ("a", "b"))
    qb.submit([1, 2, 3], request_id="r", handler="noop")
    worker = Worker([qa, qb], WorkerConfig(name="w", burst=True, dead_after=2,
                                           heartbeat="thread"))
    t = _run_in_thread(worker)
    t.join(10)
    assert not t.is_alive()
    assert qb.state("r") == "done"


def test_a_redis_error_reply_is_an_outage_not_a_crash(
    tmp_path: Path, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: BUSY (another client's long script) raised out of the slot loop and the worker's
    slot died."""
    server = start_redis(tmp_path / "redis", appendonly=False)
    client = redis.Redis.from_url(server.url, decode_responses=True)
    worker = None
    try:
        client.config_set("busy-reply-threshold", 100)
        q = Queue(client, "q", prefix=prefix)
        worker = Worker([q], WorkerConfig(name="w", dead_after=2, idle_wait=0.05,
                                          heartbeat="thread"))
        caplog.set_level(logging.INFO, logger="queueadmin.worker")
        t = _run_in_thread(worker)
        time.sleep(0.3)
        busy = redis.Redis.from_url(server.url)
        busy.eval("local s = tonumber(redis.call('TIME')[1]) "
                  "while tonumber(redis.call('TIME')[1]) < s + 2 do end return 1", 0)
        q.submit([1, 2], request_id="r", handler="noop")
        assert q.wait("r", timeout=10) == "done"
        assert t.is_alive()
        errors = [r for r in caplog.records if "Redis unavailable" in r.getMessage()]
        assert any("BUSY" in r.getMessage() for r in errors), [r.getMessage() for r in errors]
        assert len(errors) == 1, [r.getMessage() for r in errors]
    finally:
        if worker is not None:
            worker.stop(hard=True)
        client.close()
        server.stop()


def test_a_finished_tasks_ack_does_not_wait_for_the_rest_of_its_batch(
    live_queue: Queue, prefix: str
) -> None:
    """Was: acks rode on the next dequeue only, after the whole prefetched batch: a quick
    task's ack waited behind a slow one (and was lost with a crash meanwhile)."""
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 0}, {"k": k, "seconds": 2}], request_id="r",
                      handler="tracked", concurrency=2)
    # A batch of two, as a slot that grew its batch leases it: the quick one, then the slow.
    worker = Worker([live_queue], WorkerConfig(name="w", dead_after=2, heartbeat="thread"))
    leases = live_queue.dequeue("w", 2)
    assert [x.payload["seconds"] for x in leases] == [0, 2]
    worker._flusher.start()
    t = threading.Thread(target=worker._run_batch,
                         args=(live_queue, leases, worker._acks[0], time.monotonic()),
                         daemon=True)
    t.start()
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline and counters(live_queue, "r")[0] == 0:
        time.sleep(0.02)
    assert counters(live_queue, "r")[0] == 1, "the first task's ack waited for the second"
    t.join(5)
    worker._flusher_done.set()


def test_tasks_leased_behind_a_slow_one_are_given_back_for_others_to_run(
    live_queue: Queue, prefix: str
) -> None:
    """Was: a slot ran its leased batch in order, so the tasks prefetched behind a slow one
    waited for it (up to 63, with --prefetch 64) while other slots and workers idled."""
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 2}] + [{"k": k, "seconds": 0}] * 4, request_id="r",
                      handler="tracked", concurrency=5)
    worker = Worker([live_queue], WorkerConfig(name="w", dead_after=2, heartbeat="thread"))
    leases = live_queue.dequeue("w", 5)
    assert [x.payload["seconds"] for x in leases] == [2, 0, 0, 0, 0]
    worker._flusher.start()
    ran: list[int] = []
    t = threading.Thread(target=lambda: ran.append(worker._run_batch(
        live_queue, leases, worker._acks[0], time.monotonic())), daemon=True)
    t.start()
    try:
        taken: list[Any] = []
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline and len(taken) < 4:
            taken += live_queue.dequeue("other", 4)
            time.sleep(0.02)
        # Back to waiting while the slow task runs, not counted as attempts.
        assert sorted(x.task_id for x in taken) == sorted(x.task_id for x in leases[1:])
        assert {x.attempt for x in taken} == {1}
        assert task_log(live_queue, k) == [f"start {leases[0].task_id} 1 w"]
        t.join(5)
        assert ran == [1], "the slot ran what it gave back, or miscounted it"
        assert task_log(live_queue, k) == [f"start {leases[0].task_id} 1 w",
                                           f"end {leases[0].task_id} 1 w"]
        released = [e for e in events(live_queue, "released") if e["request"] == "r"]
        assert len(released) == 4, released
    finally:
        worker._flusher_done.set()


def test_a_slots_batch_grows_only_while_it_holds_little_work() -> None:
    """Was: a batch doubled toward --prefetch whenever its tasks took under 2 ms each, so a
    slot could lease 64 tasks of 1.9 ms (0.12 s of work) that idle workers could have run.
    Now it doubles to no more than 20 ms of tasks like those it ran, and to no more than 64
    requests (what Redis spends on a call grows with the requests it touches)."""
    from core.worker.config import BATCH_REQUESTS, BATCH_WORK_S, next_batch

    assert (BATCH_WORK_S, BATCH_REQUESTS) == (0.02, 64)
    one = 256.0  # a batch's tasks all of one request
    assert [next_batch(b, 5e-6, one, 256) for b in (1, 2, 128, 256)] == [2, 4, 256, 256]
    assert next_batch(64, 0.0019, one, 256) == 10  # 1.9 ms tasks: 10 of them, not 128
    assert next_batch(64, 0.004, one, 256) == 5
    assert next_batch(8, 0.021, one, 256) == 1  # a task longer than the whole budget: one
    assert next_batch(1, 0.0, 1.0, 256) == 2  # too quick to time: grows as the quickest
    assert next_batch(256, 1e-6, one, 64) == 64  # never past --prefetch
    # One-task requests stop at 64; requests of four tasks at 256.
    assert [next_batch(b, 5e-6, 1.0, 256) for b in (32, 64, 128)] == [64, 64, 64]
    assert next_batch(128, 5e-6, 4.0, 256) == 256


def test_a_batchs_tasks_per_request_are_counted_from_its_leases(live_queue: Queue) -> None:
    from core.worker.config import tasks_per_request

    live_queue.submit([{"seconds": 0}] * 3, request_id="a", handler="tracked")
    live_queue.submit([{"seconds": 0}], request_id="b", handler="tracked")
    leases = live_queue.dequeue("w", 4)
    assert sorted(x.request_id for x in leases) == ["a", "a", "a", "b"]
    assert tasks_per_request(leases) == 2.0
    assert tasks_per_request([x for x in leases if x.request_id == "a"]) == 3.0
    assert tasks_per_request([]) == 1.0


@pytest.mark.slow  # 4 s: a worker process's slot grows its batch, then meets a 3 s task
def test_a_worker_runs_the_quick_tasks_behind_a_slow_one_on_its_other_slot(
    live_queue: Queue, spawn_worker: Any, prefix: str
) -> None:
    """End to end: 300 quick tasks grow each slot's batch toward --prefetch, then one of
    3 s and 200 quick ones. Those leased behind the slow task go to the other slot, so every
    quick task after it ends before it does."""
    k = f"{prefix}:t"
    quick = {"k": k, "seconds": 0}
    live_queue.submit([quick] * 300 + [{"k": k, "seconds": 3, "tag": "slow"}] + [quick] * 200,
                      request_id="r", handler="tracked")
    spawn_worker("w1", "--slots", "2")
    assert live_queue.wait("r", timeout=30) == "done"
    log = task_log(live_queue, k)
    assert len(log) == 2 * 501, "a task ran twice or not at all"
    slow_end = log.index(next(line for line in log if line.startswith("end ") and "slow" in line))
    late = [line for line in log[slow_end + 1:] if line.startswith("end ")]
    assert late == [], f"{len(late)} quick tasks ended after the slow one: {late[:3]}"


def test_a_handoff_whose_lease_expired_before_pickup_is_not_run(
    live_queue: Queue, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker never starts a run on a lease it cannot show it still holds."""
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 0}], request_id="r", handler="tracked")
    worker = Worker([live_queue], WorkerConfig(name="w", dead_after=2, heartbeat="thread"))
    [lease] = live_queue.dequeue("w", 1)
    live_queue.release_task("r", lease.task_id)
    caplog.set_level(logging.INFO, logger="queueadmin.worker")
    # Leased "long ago": not known to be held, so the runtime asks Redis first.
    worker._run_batch(live_queue, [lease], worker._acks[0], time.monotonic() - 60)
    assert task_log(live_queue, k) == []
    assert any("not running it" in r.getMessage() for r in caplog.records)



@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_task_started_while_a_beat_is_under_way_keeps_its_time_limit(
    live_queue: Queue, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Was: the heartbeat thread read the held leases, then sent them to the beat process; a
    task that started in between (its hold and its time limit sent first) was missing from
    that sync, and the beat process dropped its lease and its limit. The lease came back at
    the next sync; the limit never did, and a stuck task ran on past it. (The thread beater
    lost the limit's length the same way: its dead letter said "0s".) Here the beat that
    straddles the start is made to: its first read of Held waits until the task has started."""
    armed, waiting, started = threading.Event(), threading.Event(), threading.Event()

    class StraddlingHeld(Held):
        def snapshot(self) -> dict[str, list[Any]]:
            got = super().snapshot()
            if threading.current_thread().name.startswith("heartbeat-") and armed.is_set():
                armed.clear()
                waiting.set()
                started.wait(10)  # the slot takes its task meanwhile
            return got

    beater = ProcessBeater if mode == "process" else ThreadBeater
    sent_limit = beater.started

    def started_and_tell(self: Any, *args: Any) -> None:
        sent_limit(self, *args)
        started.set()

    monkeypatch.setattr(runtime, "Held", StraddlingHeld)
    monkeypatch.setattr(beater, "started", started_and_tell)
    worker = Worker([live_queue], WorkerConfig(name="w", dead_after=2, time_limit=1,
                                               idle_wait=0.05, heartbeat=mode))
    t = _run_in_thread(worker)
    try:
        armed.set()
        assert waiting.wait(10)  # a beat has read Held, and waits
        # A handler that never looks at its context: only the beat process can stop it.
        live_queue.submit([{"ms": 8000}], request_id="r", handler="pause", max_attempts=1)
        assert started.wait(10)
        assert live_queue.wait("r", timeout=6) == "failed"
        [letter] = read.dead_letters(live_queue)
        assert letter.error.startswith("TimeLimitExceeded") and "1s" in letter.error
    finally:
        worker.stop(hard=True)
        t.join(15)


@handler("polls_stopping")
def polls_stopping(payload: dict[str, Any], ctx: TaskContext) -> str:
    """Waits on "something else" (as a data job waits on its Spark query, whose watcher
    cancels it when ctx.stopping says so) for payload["s"] seconds, or until it should stop."""
    ends = time.monotonic() + payload["s"]
    while time.monotonic() < ends:
        if ctx.stopping:
            STOPPED_BY.append(time.monotonic())
            return "stopped"
        time.sleep(0.02)
    return "ran to its end"


STOPPED_BY: list[float] = []


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_run_past_its_time_limit_is_told_to_stop_as_a_cancelled_one_is(
    live_queue: Queue, mode: str
) -> None:
    """A handler that waits on something else (a data job on its Spark query) polls
    ctx.stopping: a run the heartbeat failed for passing its time limit is told to stop, in
    both heartbeat modes (at once since ctx.stopping reads `timed_out`; before, a beat later,
    when the failed task's renewal came back refused and set `lost`)."""
    STOPPED_BY.clear()
    worker = Worker([live_queue], WorkerConfig(name="w", dead_after=2, time_limit=1,
                                               idle_wait=0.05, heartbeat=mode))
    t = _run_in_thread(worker)
    try:
        live_queue.submit([{"s": 30}], request_id="r", handler="polls_stopping",
                          max_attempts=1)
        started = time.monotonic()
        assert live_queue.wait("r", timeout=20) == "failed"
        [letter] = read.dead_letters(live_queue)
        assert letter.error.startswith("TimeLimitExceeded")
        # The handler saw it within a few polls of the limit, not at its 30 s end.
        deadline = time.monotonic() + 10
        while not STOPPED_BY and time.monotonic() < deadline:
            time.sleep(0.05)
        assert STOPPED_BY and STOPPED_BY[0] - started < 5
    finally:
        worker.stop(hard=True)
        t.join(15)


def test_the_reaper_prunes_workers_gone_for_over_an_hour(live_queue: Queue) -> None:
    """Was: a SIGKILLed worker stayed in the registry forever (30,000 of them: 390 ms a view)."""
    from core.worker.heartbeat import Heartbeat
    from core.worker.held import Held
    from core.worker.outage import Outage

    now = live_queue.now_ms()
    live_queue.redis.zadd(live_queue.keys.workers, {"gone": now - 2 * 3_600_000, "recent": now})
    hb = Heartbeat(worker="w", queues=[live_queue], held=Held(), lease_ms=2000, interval=0.4,
                   reap_interval=1.0, info=dict, outage=Outage(), process=False)
    hb.reap()
    assert live_queue.redis.zrange(live_queue.keys.workers, 0, -1) == ["recent"]


def test_a_hold_after_the_heartbeat_process_stopped_writes_nowhere(
    live_queue: Queue, tmp_path: Path
) -> None:
    """hold() writes to the pipe's descriptor itself; a slot still running at a hard stop may
    hold after the beater stopped, when that descriptor's number can belong to a new file."""
    beater = ProcessBeater(interval=0.2, outage=Outage(), worker="w", queues=[live_queue],
                           lease_ms=2000, ttl_ms=10_000, apply=lambda *a: None,
                           on_timeout=lambda *a: None)
    beater.start()
    live_queue.submit([1], request_id="r", handler="noop")
    [lease] = live_queue.dequeue("w", 1)
    ctx = TaskContext(lease, live_queue, "w", time.monotonic() + 2)
    beater.hold(live_queue.name, [ctx])  # through the pipe while it runs
    beater.stop()
    with open(tmp_path / "after", "wb"):  # likely the pipe's old descriptor number
        beater.hold(live_queue.name, [ctx])
    assert (tmp_path / "after").read_bytes() == b""

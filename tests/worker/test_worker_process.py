"""`manage.py runworker` as real processes: signals, lease renewal, death and recovery.

Workers run tests.handlers' "tracked" handler, which logs "start|end <task> <attempt>
<worker>" to a Redis list, so a test sees what ran where and how often.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from core.queue import Queue, read


def task_log(queue: Queue, k: str) -> list[str]:
    return list(queue.redis.lrange(f"{k}:log", 0, -1))


def events(queue: Queue, kind: str) -> list[dict[str, str]]:
    return [f for _, f in queue.redis.xrange(queue.keys.events) if f["type"] == kind]


def counters(queue: Queue, rid: str) -> tuple[int, int, int, int]:
    info = read.request(queue, rid)
    assert info is not None
    return info.done, info.waiting, info.leased, info.dead


def test_sigterm_lets_the_running_task_finish_takes_no_more_and_exits_0(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str, tmp_path: Path
) -> None:
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 2}] * 2, request_id="r", handler="tracked",
                      concurrency=1)
    proc = spawn_worker("w1", "--grace", "10")
    wait_until(lambda: task_log(live_queue, k), 15, "the first task to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    (tid,) = {line.split()[1] for line in task_log(live_queue, k)}
    assert task_log(live_queue, k) == [f"start {tid} 1 w1", f"end {tid} 1 w1"]
    assert counters(live_queue, "r") == (1, 1, 0, 0)  # finished, acked; the other not taken
    assert read.dead_letters(live_queue) == []
    assert "processed=1 failed=0" in (tmp_path / "w1.log").read_text()
    assert read.workers(live_queue).items == []


def test_a_task_longer_than_the_grace_period_is_released_without_spending_an_attempt(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 30}], request_id="r", handler="tracked")
    proc = spawn_worker("w1", "--grace", "1")
    wait_until(lambda: task_log(live_queue, k), 15, "the task to start")
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert time.monotonic() - signalled < 4  # the grace period, not the task's 30 s
    assert counters(live_queue, "r") == (0, 1, 0, 0)  # back to waiting at once
    (lease,) = live_queue.dequeue("probe", 5)
    assert lease.attempt == 1
    assert task_log(live_queue, k) == [f"start {lease.task_id} 1 w1"]


def test_a_second_sigterm_releases_the_running_task_at_once(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str, tmp_path: Path
) -> None:
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 30}], request_id="r", handler="tracked")
    proc = spawn_worker("w1", "--grace", "30")
    wait_until(lambda: task_log(live_queue, k), 15, "the task to start")
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "SIGTERM: stopping" in (tmp_path / "w1.log").read_text(), 5,
               "the worker to take the first SIGTERM")
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0
    assert time.monotonic() - signalled < 2
    assert counters(live_queue, "r") == (0, 1, 0, 0)
    (lease,) = live_queue.dequeue("probe", 5)
    assert lease.attempt == 1


@pytest.mark.slow  # a 5 s task: ten times the shortest --dead-after
def test_a_task_ten_times_longer_than_dead_after_keeps_its_lease_and_runs_once(
    live_queue: Queue, spawn_worker: Any, prefix: str, tmp_path: Path
) -> None:
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 5}], request_id="r", handler="tracked")
    # Two workers: had the lease lapsed, the idle one would reap the task and run it again.
    spawn_worker("a", "--dead-after", "0.5")
    spawn_worker("b", "--dead-after", "0.5")
    assert live_queue.wait("r", timeout=20) == "done"
    runs = task_log(live_queue, k)
    assert [line.split()[0] for line in runs] == ["start", "end"], runs
    assert events(live_queue, "reaped") == []
    assert counters(live_queue, "r") == (1, 0, 0, 0)
    for name in ("a", "b"):
        assert "lease lost" not in (tmp_path / f"{name}.log").read_text()


def test_a_killed_workers_tasks_are_reaped_and_run_by_a_live_worker(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 60, "retry_seconds": 0.2}] * 3, request_id="r",
                      handler="tracked", concurrency=3)
    doomed = spawn_worker("doomed", "--slots", "3")  # --dead-after 2
    wait_until(lambda: len(task_log(live_queue, k)) == 3, 15, "doomed to start all 3 tasks")
    spawn_worker("heir")
    wait_until(lambda: "heir" in {w.name for w in read.workers(live_queue).items}, 15,
               "the second worker to register")
    doomed.kill()
    doomed.wait(5)
    killed = time.monotonic()
    assert live_queue.wait("r", timeout=2 + 5) == "done"
    assert time.monotonic() - killed < 2 + 5
    runs = task_log(live_queue, k)
    tids = sorted(line.split()[1] for line in runs if line.endswith(" 1 doomed"))
    assert len(tids) == 3
    for tid in tids:
        assert f"start {tid} 2 heir" in runs and f"end {tid} 2 heir" in runs
    reaped = events(live_queue, "reaped")
    assert sorted((e["task"], e["worker"], e["outcome"]) for e in reaped) == [
        (tid, "doomed", "waiting") for tid in tids
    ]
    assert read.dead_letters(live_queue) == []

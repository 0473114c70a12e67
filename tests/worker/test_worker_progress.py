"""ctx.progress() and ctx.log() from real workers: shown while the handler runs, rate-limited
without losing the last value, and refused from a run whose lease was taken away."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from core.queue import Queue, read
from core.queue.models import TaskProgress
from core.worker import Registry, TaskContext, Worker, WorkerConfig


def task_log(queue: Queue, k: str) -> list[str]:
    return list(queue.redis.lrange(f"{k}:log", 0, -1))


def shown(queue: Queue, rid: str) -> TaskProgress | None:
    got = read.progress(queue, rid)
    return got[0] if got else None


def test_a_running_task_shows_each_step_and_ends_on_its_last_report(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "steps": 3}], request_id="r", handler="stepped")
    spawn_worker("w1")
    wait_until(lambda: "reported 0 1" in task_log(live_queue, k), 15, "the first step")
    p = shown(live_queue, "r")
    assert p is not None  # the first report is written at once
    assert (p.done, p.total, p.message, p.worker) == (0, 3, "step 0", "w1")
    # Logged just after the first write: kept back by the rate limit, sent by the heartbeat.
    wait_until(lambda: [line.text for line in shown(live_queue, "r").log] == ["line 0"], 3,
               "the first log line")
    live_queue.redis.set(f"{k}:go:0", 1)
    # Reported well within the rate limit of the first: sent by the heartbeat meanwhile.
    p = wait_until(lambda: (x := shown(live_queue, "r")) and x.done == 1 and x, 3,
                   "step 1 to be shown while the handler waits")
    assert (p.message, [line.text for line in p.log]) == ("step 1", ["line 0", "line 1"])
    live_queue.redis.set(f"{k}:go:1", 1)
    live_queue.redis.set(f"{k}:go:2", 1)
    assert live_queue.wait("r", timeout=10) == "done"
    p = shown(live_queue, "r")
    assert p is not None
    assert (p.done, p.total, p.message, p.percent) == (3, 3, "finished", 100.0)
    assert [line.text for line in p.log] == ["line 0", "line 1", "line 2"]


def test_a_run_whose_task_an_operator_released_reports_nothing_more(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str, tmp_path: Path
) -> None:
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "steps": 2}], request_id="r", handler="stepped")
    spawn_worker("w1")
    wait_until(lambda: "reported 0 1" in task_log(live_queue, k), 15, "the first step")
    wait_until(lambda: shown(live_queue, "r").log, 3, "the first log line")
    (entry,) = read.pending(live_queue, "r")
    live_queue.release_task("r", entry.task_id)  # the old run may go on; it no longer holds
    wait_until(lambda: "lease lost" in (tmp_path / "w1.log").read_text(), 5,
               "the worker to learn its lease is gone")
    live_queue.redis.set(f"{k}:go:0", 1)
    wait_until(lambda: "reported 1 1" in task_log(live_queue, k), 5, "the stale run's step 1")
    time.sleep(1.0)  # past the rate limit and two heartbeats: anything kept back would be sent
    p = shown(live_queue, "r")
    assert p is not None
    assert (p.done, p.message, [line.text for line in p.log]) == (0, "step 0", ["line 0"])
    live_queue.redis.set(f"{k}:go:1", 1)  # the stale run ends; the task runs again, at once
    assert live_queue.wait("r", timeout=15) == "done"
    assert task_log(live_queue, k).count("reported 0 1") == 2  # a release spends no attempt
    p = shown(live_queue, "r")
    assert p is not None and (p.done, p.message) == (2, "finished")


class Counting(Queue):
    """The test's queue, counting the progress writes the worker sends."""

    writes = 0

    def progress(self, *args: Any, **kwargs: Any) -> bool:
        self.writes += 1
        return super().progress(*args, **kwargs)


def test_a_chatty_handler_is_written_a_few_times_a_second_and_its_last_value_kept(
    live_queue: Queue,
) -> None:
    q = Counting(live_queue.redis, "q", prefix=live_queue.keys.prefix)
    started: list[float] = []

    def chatty(payload: Any, ctx: TaskContext) -> None:
        started.append(time.monotonic())
        for i in range(1, 301):
            ctx.progress(i, 300, f"row {i}")
            if i % 10 == 0:
                ctx.log(f"{i} rows")
            time.sleep(0.004)

    registry = Registry()
    registry.register("chatty", chatty)
    q.submit([1], request_id="r", handler="chatty")
    worker = Worker([q], WorkerConfig(name="w", burst=True, dead_after=1.0), registry)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    ran = time.monotonic() - started[0]
    assert ran > 1.2  # 300 reports over more than two rate-limit intervals
    # One at the start, one per 0.5 s, the last one at the end.
    assert 2 <= q.writes <= 2 + ran / 0.5, (q.writes, ran)
    p = shown(q, "r")
    assert p is not None and (p.done, p.message) == (300, "row 300")
    assert [line.text for line in p.log] == [f"{i} rows" for i in range(110, 301, 10)]

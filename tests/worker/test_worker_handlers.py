"""A worker leases only tasks whose handler it runs (issue 33): real `runworker` processes,
one of which runs a handler ("resize") the others lack. Before, routing was by queue alone:
the others leased the resize tasks and dead-lettered them on their first attempt ("no
handler named 'resize' is registered"), and the announcement outlived its worker."""

from __future__ import annotations

import signal
from typing import Any

from core.queue import Queue, handlers, read


def test_tasks_go_only_to_the_worker_that_runs_their_handler_and_wait_when_it_is_gone(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    k = f"{prefix}:t"
    # Two workers without "resize", each with two slots, idle and asking.
    for name in ("plain-a", "plain-b"):
        spawn_worker(name, "--slots", "2")
    wait_until(lambda: len(read.workers(live_queue).items) == 2, 20, "two workers")
    live_queue.submit([{"k": k}] * 30, request_id="r", handler="resize", concurrency=8)
    live_queue.submit([1] * 10, request_id="e", handler="noop")
    assert live_queue.wait("e", timeout=20) == "done"  # the plain workers do run their own
    assert read.dead_letters(live_queue) == []  # before: 8 at once, then all 30
    info = read.request(live_queue, "r")
    assert info is not None and (info.waiting, info.leased) == (30, 0)
    assert read.stats(live_queue).unrunnable == {"resize": 30}

    resizer = spawn_worker("resizer", "--import", "tests.resize_handlers", "--slots", "2")
    assert live_queue.wait("r", timeout=30) == "done"
    ran = [line.split()[1] for line in live_queue.redis.lrange(f"{k}:ran", 0, -1)]
    assert len(ran) == 30 and set(ran) == {"resizer"}
    assert read.dead_letters(live_queue) == []

    resizer.send_signal(signal.SIGTERM)
    assert resizer.wait(15) == 0
    # Its announcement ended with it: "resize" is no longer offered, new tasks wait.
    assert "resize" not in handlers.names(live_queue)
    live_queue.submit([{"k": k}] * 3, request_id="r2", handler="resize")
    wait_until(lambda: read.stats(live_queue).unrunnable == {"resize": 3}, 5,
               "the new tasks counted as waiting for a worker that runs resize")
    info = read.request(live_queue, "r2")
    assert info is not None and (info.waiting, info.leased, info.dead) == (3, 0, 0)

"""What a worker registers for the console's workers page: its --dead-after, the version and
the tasks it holds, with when it started holding each."""

from __future__ import annotations

import threading
import time
from typing import Any

from core.queue import Queue, read
from core.worker import Registry
from core.worker.runtime import Worker, WorkerConfig


def test_a_running_worker_registers_dead_after_version_and_its_tasks(
    live_queue: Queue, wait_until: Any
) -> None:
    release = threading.Event()
    registry = Registry()
    registry.register("hold", lambda payload, ctx: release.wait(10))
    live_queue.submit([1], request_id="held-1", handler="hold")
    worker = Worker([live_queue], WorkerConfig(name="info-w", dead_after=1.0, heartbeat="thread"),
                    registry)
    thread = threading.Thread(target=worker.run, daemon=True)
    before = int(time.time() * 1000)
    thread.start()
    try:
        def held() -> dict[str, Any] | None:
            items = read.workers(live_queue).items
            info = items[0].info if items else {}
            return info if info.get("tasks") else None

        info = wait_until(held, 5, "the worker to register the task it holds")
        assert info["dead_after_ms"] == 1000
        assert info["version"] not in ("", None)
        [task] = info["tasks"]
        assert (task["queue"], task["request"]) == ("q", "held-1")
        assert before - 1000 <= task["since"] <= int(time.time() * 1000)
        first_since = task["since"]
        time.sleep(0.5)  # more beats: the task keeps the time it was first seen
        assert held() is not None and held()["tasks"][0]["since"] == first_since  # type: ignore[index]
    finally:
        release.set()
        worker.stop(hard=True)
        thread.join(10)

"""A stopping worker never lets its task run twice at once (issue 33): whatever stops it (SIGTERM
and the grace running out, a second signal, an operator's stop), a task goes back to waiting
only once its handler has returned; a handler that ignores ctx.check() ends with its process,
and only then may the task start elsewhere (its lease expires or is reaped).

Workers run tests.handlers' "guarded" handler, which logs when each run starts and when it
returns (with how), in unix ms, so a test sees whether two runs of the task overlapped.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from core.queue import Queue, read


def runs(queue: Queue, k: str) -> list[list[str]]:
    return [line.split() for line in queue.redis.lrange(f"{k}:log", 0, -1)]


def started(queue: Queue, k: str, worker: str) -> list[str] | None:
    return next((r for r in runs(queue, k) if r[0] == "start" and r[2] == worker), None)


def submit(queue: Queue, k: str, check_ms: int) -> None:
    # 60 s on W (it is stopped long before), 0.2 s when it runs again.
    queue.submit([{"k": k, "seconds": 60, "check_ms": check_ms}], request_id="r",
                 handler="guarded", concurrency=1)


def start_first_on(queue: Queue, spawn_worker: Any, wait_until: Any, k: str,
                   *options: str) -> Any:
    """W takes the task (the other worker starts only once it has): returns W's process."""
    w = spawn_worker("W", "--grace", "1", *options)
    wait_until(lambda: started(queue, k, "W"), 20, "W to start the task")
    spawn_worker("V")
    wait_until(lambda: "V" in {x.name for x in read.workers(queue).items}, 20,
               "V to register")
    return w


def exited_at_ms(proc: Any) -> int:
    assert proc.wait(15) == 0
    return int(time.time() * 1000)


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["sigterm", "operator", "second-signal"])
def test_a_stopped_workers_task_starts_elsewhere_only_after_its_handler_returned(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str, tmp_path: Path,
    stop: str,
) -> None:
    k = f"{prefix}:t"
    submit(live_queue, k, check_ms=20)
    w = start_first_on(live_queue, spawn_worker, wait_until, k,
                       *(["--grace", "30"] if stop == "second-signal" else []))
    if stop == "operator":
        assert live_queue.control_worker("W", "stop", by="test") == (True, "stop")
    else:
        w.send_signal(signal.SIGTERM)
    if stop == "second-signal":
        wait_until(lambda: "SIGTERM: stopping" in (tmp_path / "W.log").read_text(), 10,
                   "W to take the first SIGTERM")
        w.send_signal(signal.SIGTERM)
    exited_at_ms(w)
    assert live_queue.wait("r", timeout=20) == "done"
    log = runs(live_queue, k)
    (w_exit,) = [r for r in log if r[0] == "exit" and r[2] == "W"]
    assert w_exit[4] == "Interrupted"  # W's handler was told to stop, and returned
    v_start = started(live_queue, k, "V")
    assert v_start is not None, log
    assert int(v_start[3]) >= int(w_exit[3]), f"V started before W's handler returned: {log}"
    assert [r[4] for r in log if r[0] == "exit"] == ["Interrupted", "end"]
    (lease_probe,) = [r for r in log if r[0] == "start" and r[2] == "V"]
    assert lease_probe  # the task ran once more, on V, to its end
    assert read.request(live_queue, "r").dead == 0  # type: ignore[union-attr]
    assert "given back: worker stopping" in (tmp_path / "W.log").read_text()


@pytest.mark.slow
def test_a_handler_that_ignores_check_ends_with_its_process_before_the_task_runs_again(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str, tmp_path: Path,
) -> None:
    k = f"{prefix}:t"
    submit(live_queue, k, check_ms=0)
    w = start_first_on(live_queue, spawn_worker, wait_until, k)
    w.send_signal(signal.SIGTERM)
    gone_ms = exited_at_ms(w)  # after the grace (1 s) and the wait for handlers (2 s)
    assert live_queue.wait("r", timeout=20) == "done"
    log = runs(live_queue, k)
    assert not [r for r in log if r[0] == "exit" and r[2] == "W"], log  # cut off mid-run
    v_start = started(live_queue, k, "V")
    assert v_start is not None, log
    assert int(v_start[3]) >= gone_ms, f"V started before W's process exited: {log}"
    text = (tmp_path / "W.log").read_text()
    assert "with 1 handlers still running" in text
    assert "released" not in text  # nothing given back while its handler ran

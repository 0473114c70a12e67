"""Worker control (issue 20, part 5): an operator's quiet, stop and resume, through the
engine's `control` operation on the worker's registry entry, read by the worker at its
heartbeat; and what a worker publishes about itself (RSS, CPU, utilization).

The worker tests run real `manage.py runworker` processes (tests.handlers' "tracked" handler
logs "start|end <task> <attempt> <worker>" to a Redis list) against the suite's redis-server;
the control goes through the service layer and the command line as an operator's would."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from core.conf import get_queue
from core.models import AuditEntry
from core.queue import InvalidInput, Queue, UnknownWorker, read, registry
from core.queue.consume import STOPPED_KEPT_MS
from core.worker.stats import Usage, rss_bytes


def task_log(queue: Queue, k: str) -> list[str]:
    return list(queue.redis.lrange(f"{k}:log", 0, -1))


def info_of(queue: Queue, name: str) -> dict[str, Any]:
    found = read.worker(queue, name)
    return found.info if found else {}


def running(q: Queue, k: str, name: str, wait_until: Any) -> None:
    """Wait until the worker runs its first task and is in the registry (where an operator
    sees it): its heartbeat process registers it as it starts, maybe after the first lease."""
    wait_until(lambda: task_log(q, k), 15, "the first task to start")
    wait_until(lambda: read.worker(q, name), 5, f"{name} to register")


def worker_cmd(*args: str) -> str:
    out = io.StringIO()
    call_command("worker", *args, stdout=out)
    return out.getvalue()


# -- the engine ----------------------------------------------------------------------------


def test_control_is_kept_on_the_registry_entry_and_a_stop_is_final(queue: Queue) -> None:
    with pytest.raises(UnknownWorker):
        queue.control_worker("w1", "quiet")
    queue.heartbeat("w1", {"queues": ["q"]})
    assert queue.worker_control("w1") == ""
    assert queue.control_worker("w1", "quiet", by="ada") == (True, "quiet")
    assert queue.control_worker("w1", "quiet") == (False, "quiet")
    queue.heartbeat("w1", {"queues": ["q"]})  # a beat rewrites its info, not the control
    assert queue.worker_control("w1") == "quiet"
    assert read.workers(queue).items[0].control == "quiet"
    assert queue.control_worker("w1", "resume") == (True, "")
    assert queue.control_worker("w1", "resume") == (False, "")
    assert queue.control_worker("w1", "stop") == (True, "stop")
    assert queue.control_worker("w1", "resume") == (False, "stop")
    assert queue.control_worker("w1", "quiet") == (False, "stop")
    with pytest.raises(InvalidInput):
        queue.control_worker("w1", "pause")


def test_a_worker_that_exits_on_a_stop_leaves_the_registry_but_stays_marked_stopped(
    queue: Queue,
) -> None:
    queue.heartbeat("w1", {"host": "h1"})
    queue.heartbeat("w2", {})
    queue.control_worker("w1", "stop", by="ada")
    queue.unregister("w1", stopped=True)
    queue.unregister("w2")
    assert read.workers(queue).items == []
    assert queue.worker_control("w1") == "stop"  # what its supervisor asks
    assert 0 < queue.redis.pttl(queue.keys.worker("w1")) <= STOPPED_KEPT_MS
    assert queue.worker_control("w2") == ""
    # Listed as stopped, by whom and when (the console's workers page).
    [stopped] = read.stopped_workers(queue)
    assert (stopped.name, stopped.by, stopped.info) == ("w1", "ada", {"host": "h1"})
    assert stopped.stopped_ms == queue.now_ms()
    with pytest.raises(UnknownWorker):  # not a worker any more: nothing to control
        queue.control_worker("w1", "resume")


def test_utilization_and_cpu_are_over_the_last_minute() -> None:
    now, cpu = [0.0], [0.0]
    usage = Usage(2, clock=lambda: now[0], cpu=lambda: cpu[0])
    usage.busy(0)
    now[0], cpu[0] = 10.0, 5.0
    first = usage.sample()
    assert first["util"] == 50.0  # one of two slots busy all along
    assert first["cpu"] == 50.0  # 5 s of CPU in 10 s
    usage.idle(0)
    now[0] = 70.0  # a minute later, idle all along: the window starts at 10 s
    assert usage.sample()["util"] == 0.0
    usage.busy(1)
    now[0] = 100.0
    usage.idle(1)
    now[0] = 130.0
    assert usage.sample()["util"] == 25.0  # 30 s busy of 2 slots x 60 s
    rss = rss_bytes()
    assert rss is not None and 10 * 2**20 < rss < 10 * 2**30


# -- real worker processes -----------------------------------------------------------------


@pytest.fixture
def ops_queue(django_queue: Queue, live_queue: Queue, db: Any) -> Queue:
    """Django (the service layer, the commands) on the suite's Redis under the test's prefix,
    where spawn_worker's workers serve queue "q"."""
    return live_queue


def test_quiet_stops_new_leases_while_the_running_task_finishes_and_resume_takes_work_again(
    ops_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str, tmp_path: Path
) -> None:
    q = ops_queue
    k = f"{prefix}:t"
    q.submit([{"k": k, "seconds": 2}], request_id="first", handler="tracked")
    spawn_worker("w1", "--dead-after", "1")  # beats every 0.2 s
    running(q, k, "w1", wait_until)
    said = worker_cmd("quiet", "w1")
    assert "worker w1: quiet asked" in said
    wait_until(lambda: info_of(q, "w1").get("quiet"), 5, "the worker to say it is quiet")
    q.submit([{"k": k, "seconds": 0}], request_id="second", handler="tracked")
    assert q.wait("first", timeout=10) == "done"  # the running task finished
    time.sleep(1.5)  # seven beats: a worker that still took work would have taken it
    assert [line.split()[0] for line in task_log(q, k)] == ["start", "end"]
    second = read.request(q, "second")
    assert second is not None and (second.waiting, second.leased) == (1, 0)
    assert info_of(q, "w1")["quiet"] is True and info_of(q, "w1")["running"] == 0
    worker_cmd("resume", "w1", "--wait", "5")
    assert q.wait("second", timeout=10) == "done"
    assert len(task_log(q, k)) == 4
    assert list(AuditEntry.objects.order_by("id").values_list("action", "acted", "source")) \
        == [("worker-quiet", 1, "cli"), ("worker-resume", 1, "cli")]
    log = (tmp_path / "w1.log").read_text()
    assert "quiet requested by an operator" in log and "resumed by an operator" in log


def test_stop_lets_the_running_task_finish_within_grace_and_exits_0(
    ops_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    q = ops_queue
    k = f"{prefix}:t"
    q.submit([{"k": k, "seconds": 1.5}] * 2, request_id="r", handler="tracked", concurrency=1)
    proc = spawn_worker("w1", "--dead-after", "1", "--grace", "10")
    running(q, k, "w1", wait_until)
    asked = time.monotonic()
    worker_cmd("stop", "w1")
    assert proc.wait(10) == 0
    assert time.monotonic() - asked < 0.2 + 1.5 + 2  # a beat, the task's rest, the exit
    info = read.request(q, "r")
    assert info is not None and (info.done, info.waiting, info.leased) == (1, 1, 0)
    assert len(task_log(q, k)) == 2  # the second task was never started
    assert read.worker(q, "w1") is None
    assert q.worker_control("w1") == "stop"  # for its supervisor: not started again
    spawn_worker("w1", "--dead-after", "1")  # started again by hand, same name: a new life
    assert q.wait("r", timeout=15) == "done"
    assert q.worker_control("w1") == ""


def test_stop_gives_back_a_task_still_running_after_the_grace_time(
    ops_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    q = ops_queue
    k = f"{prefix}:t"
    q.submit([{"k": k, "seconds": 30}], request_id="r", handler="tracked")
    proc = spawn_worker("w1", "--dead-after", "1", "--grace", "1")
    running(q, k, "w1", wait_until)
    asked = time.monotonic()
    worker_cmd("stop", "w1", "--wait", "10")  # waits until it has left the registry
    assert proc.wait(5) == 0
    assert time.monotonic() - asked < 0.2 + 1 + 2.5
    info = read.request(q, "r")
    assert info is not None and (info.waiting, info.leased) == (1, 0)
    (lease,) = q.dequeue("probe", 1)
    assert lease.attempt == 1  # released, not counted as an attempt


def test_a_worker_publishes_rss_cpu_utilization_uptime_and_version(
    ops_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    q = ops_queue
    k = f"{prefix}:t"
    q.submit([{"k": k, "seconds": 30}], request_id="r", handler="tracked")
    spawn_worker("w1", "--dead-after", "1", "--slots", "2")
    running(q, k, "w1", wait_until)
    time.sleep(2)  # beats while one slot of two is busy
    info = info_of(q, "w1")
    assert 20 * 2**20 < info["rss"] < 4 * 2**30
    assert 0 <= info["cpu"] < 400
    assert 30 <= info["util"] <= 55  # one of two slots busy for most of its life
    assert info["started"] <= time.time() and info["version"]
    q.cancel("r")


def test_the_command_names_what_is_wrong_and_exits_non_zero(ops_queue: Queue) -> None:
    q = ops_queue
    q.heartbeat("w1", {"queues": ["q"], "dead_after_ms": 2000})
    registry.touch([q])  # as a worker's heartbeat does: the queue is known
    with pytest.raises(CommandError) as caught:
        worker_cmd("quiet", "nobody-here")
    assert caught.value.returncode == 2
    assert "no worker named 'nobody-here'" in str(caught.value)
    with pytest.raises(CommandError) as caught:
        worker_cmd("stop", "w1", "--queue", "q", "--as", "nobody")
    assert caught.value.returncode == 2 and "--as 'nobody'" in str(caught.value)
    for wait in ("-1", "nan", "1e9"):  # refused before anything is asked of the worker
        with pytest.raises(CommandError) as caught:
            worker_cmd("stop", "w1", "--queue", "q", "--wait", wait)
        assert caught.value.returncode == 2 and "--wait" in str(caught.value)
    assert q.worker_control("w1") == ""
    other = get_queue("elsewhere")
    registry.touch([other])
    with pytest.raises(CommandError) as caught:
        worker_cmd("quiet", "w1", "--queue", "elsewhere")
    assert caught.value.returncode == 2 and "it serves q" in str(caught.value)
    worker_cmd("stop", "w1", "--queue", "q")
    with pytest.raises(CommandError) as caught:
        worker_cmd("resume", "w1")
    assert caught.value.returncode == 1 and "a stop cannot be undone" in str(caught.value)
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "acted", "error"))
    assert entries[0][:2] == ("worker-stop", 1)
    assert entries[1][0] == "worker-resume" and "cannot be undone" in entries[1][2]

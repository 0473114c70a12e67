"""Under `manage.py runstack`, a worker an operator stopped (the workers page, `manage.py
worker stop`) stays stopped: the supervisor, which starts again a worker that exits, reads
that it was asked to stop and leaves it so until the stack is restarted (a SIGKILLed worker
is still started again: tests/stack/test_stack.py)."""

from __future__ import annotations

import signal
import time

import pytest

from core.procs import free_port, pid_alive
from core.queue import Queue, read
from tests.stack_support import StartStack, until


@pytest.mark.slow  # 9 s alone: a stack, its worker stopped, then the restart delay waited out
def test_a_worker_stopped_by_an_operator_is_not_started_again(
    start_stack: StartStack,
) -> None:
    redis_port = free_port()
    stack = start_stack("--workers", "1", QA_REDIS_PORT=str(redis_port), QUEUE_PREFIX="st")
    stack.wait_for_line(r"queueadmin is up")
    pid = stack.pid_of("worker-1")
    stack.wait_for_line(r"worker started ")
    queue = Queue.from_url(f"redis://127.0.0.1:{redis_port}/0", "default", prefix="st")
    until(lambda: read.workers(queue).items)
    [worker] = read.workers(queue).items
    assert worker.name.endswith("worker-1.1")

    assert queue.control_worker(worker.name, "stop", by="test") == (True, "stop")

    stack.wait_for_line(rf"worker-1 \(pid {pid}\) exited with code 0: an operator stopped it",
                        timeout=30)
    assert not pid_alive(pid)
    time.sleep(2.5)  # past the restart delay (1 s) of a worker that merely exited
    assert "".join(stack.lines).count("worker-1 (pid") == 2  # started, and stopped: no other
    assert stack.process.poll() is None  # the rest of the stack runs on
    assert read.workers(queue).items == []
    queue.redis.close()
    stack.process.send_signal(signal.SIGTERM)
    assert stack.process.wait(30) == 0

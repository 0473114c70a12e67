"""`manage.py worker quiet|stop|resume NAME`: the workers page's control at the command line,
through the same service layer (core.ops.workers), audited with the OS user (or --as) as the
actor. An unknown worker or bad input exits 2; a worker that cannot do it (it is stopping
already, it left) exits 1."""

from __future__ import annotations

import time
from typing import TextIO

from django.core.management.base import CommandError

from core.ops import workers
from core.ops.actions import Result, open_queue
from core.ops.audit import Actor, os_actor
from core.ops.errors import BadInput
from core.queue import Queue, read
from core.queue.models import WorkerInfo

from .ops import ops_errors

POLL_S = 0.2
MAX_WAIT_S = 86_400


def control(*, command: str, worker: str, out: TextIO, queue: str | None = None,
            actor: Actor | None = None, wait: float | None = None) -> Result:
    """Ask `worker` to quiet, stop or resume; with `wait` (seconds), wait until it has done
    so (quiet or resumed as its heartbeat says, or gone from the registry after a stop)."""
    actor = actor or os_actor()
    with ops_errors(f"worker {command}"):
        if wait is not None and not 0 <= wait <= MAX_WAIT_S:  # checked before anything is asked
            raise BadInput(f"--wait {wait:g}: a number of seconds from 0 to {MAX_WAIT_S:,}")
        if queue is None and command in workers.COMMANDS:
            queue = workers.home_of(worker).name  # BadInput (exit 2) if it is nowhere
        result = workers.control(actor, command, worker, queue=queue)
        out.write(result.message + "\n")
        if wait is not None and queue is not None:
            _wait(command, worker, open_queue(queue), wait, out)
    return result


def _wait(command: str, worker: str, home: Queue, timeout: float, out: TextIO) -> None:
    deadline = time.monotonic() + timeout
    while True:
        found = read.worker(home, worker)
        if _done(command, found):
            out.write(f"worker {worker}: {_state(command)}\n")
            return
        if time.monotonic() >= deadline:
            raise CommandError(f"worker {command}: worker {worker} was asked, but did not "
                               f"say it is {_state(command)} within {timeout:g} s (is it "
                               "alive? the workers page shows its last heartbeat)")
        time.sleep(POLL_S)


def _done(command: str, found: WorkerInfo | None) -> bool:
    if command == "stop":
        return found is None
    return found is not None and found.info.get("quiet") is (command == "quiet")


def _state(command: str) -> str:
    return {"quiet": "quiet", "resume": "taking tasks again", "stop": "stopped"}[command]

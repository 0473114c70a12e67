"""Worker control (issue 20): an operator asks a running worker to go quiet (take no new
task, finish the running ones), to stop (the same, then exit 0, its running tasks given its
grace time), or to resume after a quiet. The request goes into the worker's registry entry
in each of its queues (Queue.control_worker); the worker reads it at its next heartbeat (a
fifth of its --dead-after). One audit entry per call, a refusal too."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from core.conf import DEFAULT_QUEUE, get_queue, redis_client
from core.queue import InvalidInput, Queue, QueueError, UnknownWorker, read
from core.queue.keys import validate_id
from core.queue.models import WorkerInfo

from . import audit
from .actions import Result, check_permission, open_queue
from .audit import as_actor
from .errors import BadInput, NotFound, StaleState

COMMANDS = {"quiet": "worker-quiet", "stop": "worker-stop", "resume": "worker-resume"}


def control(who: Any, command: str, worker: str, *, queue: str | None = None) -> Result:
    """Ask `worker` to quiet, stop or resume. `queue`: the queue whose page showed it (the
    console); None looks for it in every queue of the registry (the command line). The
    request is made in every queue the worker serves, so that it holds whichever it reads.

    BadInput: an unknown command, a malformed name, or (without `queue`) no such worker
    anywhere; StaleState (audited): it is not registered in `queue` (it stopped, or was
    reclaimed), or it is stopping and a quiet or resume cannot undo that."""
    actor = as_actor(who)
    action = COMMANDS.get(command)
    if action is None:
        raise BadInput(f"a worker is told quiet, stop or resume, not {command!r}")
    target = f"worker {worker}"
    check_permission(actor, action, queue or "", target, 1)
    try:
        name = validate_id(worker, "worker name")
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None
    home, found = _find(name, queue)
    if found is None and queue is not None:
        elsewhere = _serving(name)
        if elsewhere:
            raise BadInput(f"worker {name!r} is not in queue {home.name!r}: it serves "
                           f"{', '.join(elsewhere)}")
    if found is None:
        why = (f"worker {name!r} is not registered in queue {home.name!r} (it stopped, or "
               "was reclaimed): nothing was asked of it")
        audit.record(actor, action, home.name, target=target, count=1, error=why)
        raise StaleState(why)
    answers: dict[str, tuple[bool, str]] = {}
    try:
        for q in [home, *_other_queues(found, home)]:
            try:
                answers[q.name] = q.control_worker(name, command, by=actor.name)
            except UnknownWorker:  # not (or no longer) registered there
                continue
    except QueueError as exc:
        audit.record(actor, action, home.name, target=target, count=1,
                     acted=int(any(did for did, _ in answers.values())), error=str(exc))
        raise
    changed = any(did for did, _ in answers.values())
    why = ""
    if home.name not in answers:
        why = f"worker {name!r} left queue {home.name!r} just now: nothing was asked of it"
    elif command != "stop" and answers[home.name][1] == "stop":
        why = (f"worker {name!r} is stopping (asked to stop before): a stop cannot be "
               "undone; start a new worker instead")
    if why:
        audit.record(actor, action, home.name, target=target, count=1, acted=int(changed),
                     error=why)
        raise StaleState(why)
    entry = audit.record(actor, action, home.name, target=target, count=1,
                         acted=int(changed), skipped=int(not changed))
    return Result(action, int(changed), int(not changed), _message(command, name, changed,
                                                                   found), entry.id)


def _find(name: str, queue: str | None) -> tuple[Queue, WorkerInfo | None]:
    if queue is not None:
        q = open_queue(queue)
        return q, read.worker(q, name)
    return _search(name)


def _registries() -> list[str]:
    """The queues whose registries a worker may be in: the default queue first."""
    return list(dict.fromkeys([DEFAULT_QUEUE, *read.queues(
        redis_client(), prefix=settings.QUEUE_PREFIX)]))


def _serving(name: str) -> list[str]:
    """The queues in whose registry worker `name` is."""
    return [n for n in _registries() if read.worker(get_queue(n), name) is not None]


def home_of(worker: str) -> Queue:
    """The first queue (by name) in whose registry `worker` is; BadInput if none."""
    try:
        return _search(validate_id(worker, "worker name"))[0]
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None


def _search(name: str) -> tuple[Queue, WorkerInfo]:
    names = _registries()
    for n in names:
        q = get_queue(n)
        found = read.worker(q, name)
        if found is not None:
            return q, found
    raise NotFound(f"there is no worker named {name!r} in any queue ({len(names)} looked "
                   "at): it stopped, or the name is wrong; the console's workers page, or "
                   "`manage.py queuestat`, shows the live ones")


def _other_queues(found: WorkerInfo, home: Queue) -> list[Queue]:
    """The other queues the worker says it serves (as its heartbeat lists them)."""
    listed = found.info.get("queues")
    out = []
    for n in dict.fromkeys(listed if isinstance(listed, list) else []):
        if n != home.name and isinstance(n, str):
            try:
                out.append(get_queue(validate_id(n, "queue name")))
            except InvalidInput:
                continue
    return out


def _message(command: str, name: str, changed: bool, found: WorkerInfo) -> str:
    beat = _beat_s(found)
    if command == "quiet":
        return (f"worker {name}: quiet asked; within {beat} (its next heartbeat) it takes no "
                "new task, and finishes the ones it runs" if changed
                else f"worker {name} was already asked to be quiet; nothing changed")
    if command == "stop":
        return (f"worker {name}: stop asked; within {beat} (its next heartbeat) it takes no "
                "new task, finishes the ones it runs (up to its grace time, then gives them "
                "back) and exits" if changed
                else f"worker {name} was already asked to stop; nothing changed")
    return (f"worker {name}: resumed; within {beat} (its next heartbeat) it takes tasks again"
            if changed else f"worker {name} was not quiet; nothing changed")


def _beat_s(found: WorkerInfo) -> str:
    try:
        dead_after_ms = int(found.info.get("dead_after_ms") or 10_000)
    except (TypeError, ValueError):
        dead_after_ms = 10_000
    return f"{max(dead_after_ms / 5000, 0.1):g} s"

"""`manage.py runworker` as a plain function, callable from tests and other entry points."""

from __future__ import annotations

import gc
import logging
import os
from collections.abc import Callable, Iterable

from core import tracing
from core.queue import Queue, RedisUnavailable, handlers
from core.queue.keys import validate_id

from .config import WorkerConfig
from .registry import Registry, default_registry
from .runtime import Worker

log = logging.getLogger("queueadmin.worker")


def run_worker(
    queue_names: Iterable[str],
    make_queue: Callable[[str], Queue],
    config: WorkerConfig,
    *,
    handler_modules: Iterable[str] = (),
    registry: Registry | None = None,
    exit_process: bool = False,
    freeze_start: bool = False,
) -> int:
    """Build the queues, import handler modules, check Redis answers, run; returns 0.

    With `exit_process` (the runworker command, a process of the worker's own), a stop that
    leaves handlers running (they ignored ctx.check() past the grace) ends the process at
    once, handlers and all, rather than waiting at the interpreter's exit for threads they may
    have started: their leases are no longer renewed, so their tasks run again elsewhere only
    after this run is gone.

    With `freeze_start` (runworker from the command line: the process is the worker's own),
    what the process made to start (Django, the handlers' modules, the queues: ~80,000
    objects) is moved out of the garbage collector's sight (gc.freeze) before the first
    task, so that a full collection looks only at what tasks made: with tracing on, one took
    ~0.1 s of a slow machine's CPU every 20,000 tasks or so (their spans' records wait for
    their thread), 0.02-0.04 s frozen (docs/tracing.md). Not in a program's own process
    (a test's call_command): what it holds would never be collected."""
    registry = registry or default_registry
    tracing.setup_from_env()  # OpenTelemetry, if the OTEL_* settings ask for it (issue 38)
    registry.load(["core.worker.builtins", *handler_modules])
    names = list(dict.fromkeys(validate_id(n, "queue name") for n in queue_names))
    queues = [make_queue(n) for n in names]
    for q in queues:
        try:
            q.prepare()
        except RedisUnavailable as exc:
            # At start, a clear error beats a worker that sits retrying a wrong URL;
            # an outage after start is retried (see Outage).
            raise RedisUnavailable(f"cannot reach Redis for queue {q.name!r}: {exc}") from exc
    for q in queues:  # so producers can tell a handler that runs here from a typo
        # For as long as a heartbeat vouches for this process: each beat renews it.
        handlers.announce(q, config.name, registry.names(), live_ms=config.lease_ms)
    worker = Worker(queues, config, registry)
    if freeze_start:
        gc.collect()
        gc.freeze()
    code = worker.run()
    if exit_process and worker.abandoned:
        logging.shutdown()  # flush the log before the threads are cut off
        os._exit(code)
    return code

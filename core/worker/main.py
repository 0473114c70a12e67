"""`manage.py runworker` as a plain function, callable from tests and other entry points."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from core.queue import Queue, RedisUnavailable, handlers
from core.queue.keys import validate_id

from .registry import Registry, default_registry
from .runtime import Worker, WorkerConfig

log = logging.getLogger("queueadmin.worker")


def run_worker(
    queue_names: Iterable[str],
    make_queue: Callable[[str], Queue],
    config: WorkerConfig,
    *,
    handler_modules: Iterable[str] = (),
    registry: Registry | None = None,
) -> int:
    """Build the queues, import handler modules, check Redis answers, run; returns 0."""
    registry = registry or default_registry
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
        handlers.announce(q, config.name, registry.names())
    return Worker(queues, config, registry).run()

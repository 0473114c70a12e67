"""Handlers for the browser tests of the console's actions, loaded into the stack's workers
through QA_HANDLER_MODULES=tests.browser_handlers (the stack runs from the project root, so
`tests` is importable).

Each records in Redis, under keys of the worker's own client, what a test then waits for."""

from __future__ import annotations

import time
from typing import Any

from core.worker import TaskContext, handler
from core.worker.context import Cancelled


@handler("flaky")
def flaky(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Fails the first time a task runs and succeeds every time after: a requeued dead
    letter then finishes (attempts are reset by a requeue, so the first run is remembered in
    Redis, not judged by ctx.attempt)."""
    first = ctx.queue.redis.set(f"browser:flaky:{ctx.request_id}:{ctx.task_id}", "1", nx=True,
                                ex=3600)
    if first:
        raise RuntimeError(f"upstream refused row {payload.get('row')} (first try)")


@handler("slow")
def slow(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Works `seconds` on its first run (`again` seconds on a later one), checking for
    cancellation every 0.1 s; a cancelled run is counted in browser:stopped:<request>."""
    r = ctx.queue.redis
    first = r.set(f"browser:slow:{ctx.request_id}:{ctx.task_id}", "1", nx=True, ex=3600)
    seconds = float(payload["seconds"] if first else payload.get("again", 0.2))
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            ctx.check()
            time.sleep(min(left, 0.1))
    except Cancelled:
        r.incr(f"browser:stopped:{ctx.request_id}")
        raise


@handler("steps")
def steps(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Reports progress i of `steps` ("step i+1 of N") and logs "started step i+1", then waits
    (checking for cancellation, at most a minute) for the key browser:steps:<request>:<i>
    that the test sets; at the end reports N of N, "all steps done"."""
    n = int(payload["steps"])
    r = ctx.queue.redis
    for i in range(n):
        ctx.progress(i, n, f"step {i + 1} of {n}")
        ctx.log(f"started step {i + 1}")
        deadline = time.monotonic() + 60
        while not r.exists(f"browser:steps:{ctx.request_id}:{i}") and time.monotonic() < deadline:
            ctx.check()
            time.sleep(0.05)
    ctx.progress(n, n, "all steps done")

"""Built-in handlers for tests, demos and benchmarks."""

from __future__ import annotations

import time
from typing import Any

from .context import TaskContext
from .registry import handler


@handler("noop")
def noop(payload: Any, ctx: TaskContext) -> None:
    """Does nothing: measures the queue itself."""


@handler("echo")
def echo(payload: Any, ctx: TaskContext) -> Any:
    """Returns its payload."""
    return payload


@handler("sleep")
def sleep(payload: Any, ctx: TaskContext) -> None:
    """Sleeps `seconds` (payload {"seconds": S}), checking for cancellation every 0.1 s."""
    seconds = float(payload["seconds"]) if isinstance(payload, dict) else float(payload)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ctx.check()
        time.sleep(min(left, 0.1))


@handler("fail")
def fail(payload: Any, ctx: TaskContext) -> None:
    """Always raises."""
    message = payload.get("message") if isinstance(payload, dict) else None
    raise RuntimeError(message or f"task {ctx.task_id} failed on purpose (handler 'fail')")

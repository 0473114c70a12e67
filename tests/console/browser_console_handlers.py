"""Handlers for the browser tests of what the console shows (a request's timeline, its
progress, the workers table), loaded into the stack's workers through
QA_HANDLER_MODULES=tests.console.browser_console_handlers.

Each waits on, or records in, Redis keys of the worker's own client that a test sets or reads."""

from __future__ import annotations

import time
from typing import Any

from core.worker import TaskContext, handler


@handler("fails-until")
def fails_until(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Fails ("upstream refused row N") while the key console:pass:<request> is not set;
    succeeds once it is: a request that fails, is requeued, fails again, then finishes."""
    if not ctx.queue.redis.exists(f"console:pass:{ctx.request_id}"):
        raise RuntimeError(f"upstream refused row {payload.get('row')}")


@handler("reports")
def reports(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Reports `done` of `total` at once, then waits (checking, at most two minutes) until
    the key console:finish:<request> is set."""
    ctx.progress(float(payload["done"]), float(payload["total"]), "working")
    ctx.flush_progress()
    deadline = time.monotonic() + 120
    while (not ctx.queue.redis.exists(f"console:finish:{ctx.request_id}")
           and time.monotonic() < deadline):
        ctx.check()
        time.sleep(0.05)

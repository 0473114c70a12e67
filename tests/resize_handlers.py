"""A handler only some workers run (issue 33): `runworker --import tests.resize_handlers`
adds "resize" to tests.handlers' set, as a team's image-processing worker would."""

from __future__ import annotations

from typing import Any

from core.worker import TaskContext, handler


@handler("resize")
def resize(payload: dict[str, Any], ctx: TaskContext) -> str:
    """Records which worker ran the task in the list <k>:ran; returns the worker's name."""
    ctx.queue.redis.rpush(f"{payload['k']}:ran", f"{ctx.task_id} {ctx.worker}")
    return ctx.worker

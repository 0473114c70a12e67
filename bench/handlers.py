"""Handlers used only by the benchmarks (loaded with `runworker --import bench.handlers`)."""

from __future__ import annotations

import time
from typing import Any

from core.worker import TaskContext, handler


@handler("latency")
def latency(payload: Any, ctx: TaskContext) -> None:
    """Records how long after its submit the task started (ns since the payload's stamp)."""
    started = time.time_ns()
    ctx.queue.redis.rpush(payload["key"], started - payload["t"])

"""Handlers used only by the benchmarks (loaded with `runworker --import bench.handlers`)."""

from __future__ import annotations

import time
from typing import Any

from core.worker import TaskContext, handler


@handler("latency")
def latency(payload: Any, ctx: TaskContext) -> int:
    """How long after its submit the task started (ns since the payload's stamp): its
    result, which the benchmark reads back (read.all_results)."""
    return time.time_ns() - int(payload["t"])


_BUGS: dict[str, type[Exception]] = {"parse": ValueError, "key": KeyError,
                                     "timeout": TimeoutError, "zero": ZeroDivisionError}


@handler("bug")
def bug(payload: Any, ctx: TaskContext) -> None:
    """Fails, always, with the bug its payload names ({"bug": name, "i": n}): the same bug's
    messages differ by their numbers and quoted names, as real ones do, and share one masked
    fingerprint; another name is another bug (bench/bench_alerts.py)."""
    name, i = str(payload["bug"]), int(payload.get("i", 0))
    if name == "parse":
        raise ValueError(f"bad row {i} in 'part-{i}.csv'")
    if name in _BUGS:
        raise _BUGS[name](f"step failed after {i} tries")
    raise RuntimeError(f"the {name} step broke")


@handler("nap")
def nap(payload: Any, ctx: TaskContext) -> None:
    """Sleeps payload["s"] seconds (work that keeps a worker busy for a while)."""
    time.sleep(float(payload["s"]))

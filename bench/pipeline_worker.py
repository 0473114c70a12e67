"""`manage.py runworker` with timestamps for bench_pipeline.py: when each lease was handed to
the worker (dequeue), when its Spark work started and ended (the session handed to the task,
and back), and when its ack returned; one JSON line per event to $BENCH_TIMINGS. The wrappers
add a time.time() and a small write per event, nothing on Redis."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from core.pipeline import tasks
    from core.queue import Queue
    from core.worker.runtime import Worker

    out = open(os.environ["BENCH_TIMINGS"], "a", buffering=1)  # noqa: SIM115 (process-long)
    me = os.getpid()

    def emit(ev: str, lease: str, **kw: Any) -> None:
        out.write(json.dumps({"ev": ev, "lease": lease, "t": time.time(), "pid": me, **kw})
                  + "\n")

    def _token(x: Any) -> str:
        return str(getattr(x, "lease", x))

    ack_and_dequeue = Queue.ack_and_dequeue
    ack_many = Queue.ack_many
    idle = Worker._idle

    def timed_ack_and_dequeue(self: Any, consumer: str, count: int, acks: Any = (),
                              **kw: Any) -> Any:
        accepted, got, due = ack_and_dequeue(self, consumer, count, acks, **kw)
        for token in acks:
            emit("ack", _token(token))
        for lease in got:
            emit("lease", lease.lease, handler=lease.handler)
        return accepted, got, due

    def timed_ack_many(self: Any, leases: Any) -> Any:
        accepted = ack_many(self, leases)
        for token in leases:
            emit("ack", _token(token))
        return accepted

    def timed_idle(self: Any, next_due_ms: int) -> Any:
        handed = idle(self, next_due_ms)
        if handed is not None:
            for lease in handed[1]:
                emit("lease", lease.lease, handler=lease.handler)
        return handed

    sparking = tasks.sparking

    @contextlib.contextmanager
    def timed_sparking(spec: Any, payload: dict[str, Any], ctx: Any) -> Iterator[Any]:
        with sparking(spec, payload, ctx) as session:
            emit("spark_start", ctx.lease.lease, op=payload.get("op"), job=spec.job_id)
            yield session
        emit("spark_end", ctx.lease.lease, op=payload.get("op"))

    Queue.ack_and_dequeue = timed_ack_and_dequeue  # type: ignore[method-assign]
    Queue.ack_many = timed_ack_many  # type: ignore[method-assign]
    Worker._idle = timed_idle  # type: ignore[method-assign]
    tasks.sparking = timed_sparking  # type: ignore[assignment]
    execute_from_command_line(["manage.py", "runworker", *sys.argv[1:]])


if __name__ == "__main__":
    main()

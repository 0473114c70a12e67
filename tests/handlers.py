"""Handlers for the worker tests, loaded into worker processes with `runworker --import
tests.handlers`.

They record what they do in Redis, under keys the test passes in the payload (its own
prefix), through the worker's own client (`ctx.queue.redis`), so a test can tell which task
ran, how often, on which worker, and how many tasks of one request ran at the same instant.
"""

from __future__ import annotations

import os
import time
from typing import Any

from core.worker import TaskContext, handler
from core.worker.context import LeaseGone

# Atomically: join the request's running set, raise the recorded maximum of its size, count
# this execution of the task, and when the set outgrows the request's concurrency, keep its
# members in the overlaps list (for the failure message).
# KEYS: running set, max hash, executions hash, overlaps list.
# ARGV: member ("<pid>/<task>"), request id, "<request>/<task>", concurrency.
_ENTER = """
redis.call('SADD', KEYS[1], ARGV[1])
local n = redis.call('SCARD', KEYS[1])
local top = tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0')
if n > top then redis.call('HSET', KEYS[2], ARGV[2], n) end
redis.call('HINCRBY', KEYS[3], ARGV[3], 1)
if n > tonumber(ARGV[4]) then
  local members = table.concat(redis.call('SMEMBERS', KEYS[1]), ' ')
  redis.call('RPUSH', KEYS[4], ARGV[2] .. ': ' .. members)
end
return n
"""
_scripts: dict[int, Any] = {}  # id(client) -> registered script (EVALSHA)


def _enter(r: Any) -> Any:
    script = _scripts.get(id(r))
    if script is None:
        script = _scripts[id(r)] = r.register_script(_ENTER)
    return script


def chaos_keys(base: str, request_id: str) -> tuple[str, str, str, str]:
    """(running set of one request, max-running hash, executions hash, overlaps list)."""
    return f"{base}:running:{request_id}", f"{base}:max", f"{base}:execs", f"{base}:over"


@handler("chaos")
def chaos(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Payload {"k": key base, "c": the request's concurrency, "ms": work time}. Records the
    number of this request's tasks running at once; the member stays behind if the worker
    is killed mid-task (the test removes it by pid)."""
    keys = chaos_keys(payload["k"], ctx.request_id)
    member = f"{os.getpid()}/{ctx.task_id}"
    r = ctx.queue.redis
    _enter(r)(keys=list(keys),
              args=[member, ctx.request_id, f"{ctx.request_id}/{ctx.task_id}", payload["c"]])
    time.sleep(payload["ms"] / 1000)
    r.srem(keys[0], member)


@handler("tracked")
def tracked(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Payload {"k": key base, "seconds": S, "retry_seconds": S2 (optional), "tag": T
    (optional)}: logs "start <task> <attempt> <worker>[ <tag>]" to the list <k>:log, works S
    seconds (S2 on a redelivery) checking for cancellation, then logs "end <task> <attempt>
    <worker>[ <tag>]"."""
    r = ctx.queue.redis
    log = f"{payload['k']}:log"
    who = f"{ctx.task_id} {ctx.attempt} {ctx.worker}" + (f" {payload['tag']}" if "tag" in payload
                                                          else "")
    r.rpush(log, f"start {who}")
    seconds = float(payload["seconds"])
    if ctx.attempt > 1 and "retry_seconds" in payload:
        seconds = float(payload["retry_seconds"])
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        ctx.check()
        time.sleep(min(left, 0.05))
    r.rpush(log, f"end {who}")


@handler("pause")
def pause(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Payload {"ms": M}: a short piece of work that needs nothing from Redis."""
    time.sleep(payload["ms"] / 1000)


@handler("gil_sleep")
def gil_sleep(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Payload {"k": key base, "seconds": S}: logs "start <task> <attempt> <worker>", then
    blocks S seconds in native code that keeps the GIL (libc sleep through ctypes.PyDLL, which
    does not release it), like a C extension that never lets go; then logs "end ...". No
    thread of this process runs meanwhile."""
    import ctypes
    import ctypes.util

    r = ctx.queue.redis
    r.rpush(f"{payload['k']}:log", f"start {ctx.task_id} {ctx.attempt} {ctx.worker}")
    libc = ctypes.PyDLL(ctypes.util.find_library("c"))
    libc.sleep(int(payload["seconds"]))
    r.rpush(f"{payload['k']}:log", f"end {ctx.task_id} {ctx.attempt} {ctx.worker}")


@handler("gated")
def gated(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Payload {"k": key base}: logs "start <task> <attempt> <worker>", then waits without a
    check, as a handler deep in native code would, until the key <k>:gate exists (at most a
    minute); then checks: a run whose lease was taken meanwhile logs "gone ..." and stops
    (LeaseGone), any other logs "end ...". A task may run on only once the line saying its
    run stopped is there."""
    r = ctx.queue.redis
    log = f"{payload['k']}:log"
    r.rpush(log, f"start {ctx.task_id} {ctx.attempt} {ctx.worker}")
    deadline = time.monotonic() + 60
    while not r.exists(f"{payload['k']}:gate") and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        ctx.check()
    except LeaseGone:
        r.rpush(log, f"gone {ctx.task_id} {ctx.attempt} {ctx.worker}")
        raise
    r.rpush(log, f"end {ctx.task_id} {ctx.attempt} {ctx.worker}")


@handler("stepped")
def stepped(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Payload {"k": key base, "steps": N}: for each step i, reports progress i of N with the
    message "step i" and the log line "line i", pushes "reported <i> <attempt>" to <k>:log,
    then waits (at most a minute, checking nothing) for the key <k>:go:<i>; at the end
    reports N of N, "finished". A test moves it on step by step."""
    r = ctx.queue.redis
    steps = int(payload["steps"])
    for i in range(steps):
        ctx.progress(i, steps, f"step {i}")
        ctx.log(f"line {i}")
        r.rpush(f"{payload['k']}:log", f"reported {i} {ctx.attempt}")
        deadline = time.monotonic() + 60
        while not r.exists(f"{payload['k']}:go:{i}") and time.monotonic() < deadline:
            time.sleep(0.02)
    ctx.progress(steps, steps, "finished")


@handler("guarded")
def guarded(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Payload {"k": key base, "seconds": S, "then_seconds": S2, "check_ms": M}: works S
    seconds (the first run logged; S2 for the runs after it), calling ctx.check() every M ms
    (0: never, a handler that ignores it). Logs "start <task> <worker> <unix ms>" when it
    begins and "exit <task> <worker> <unix ms> <how>" whenever it returns or raises (how: end,
    or the exception's name) to the list <k>:log. A run cut off with its process (the thread
    killed) logs no exit."""
    r = ctx.queue.redis
    log = f"{payload['k']}:log"
    first = r.rpush(log, f"start {ctx.task_id} {ctx.worker} {int(time.time() * 1000)}") == 1
    how = "end"
    try:
        seconds = payload["seconds"] if first else payload.get("then_seconds", 0.2)
        deadline = time.monotonic() + float(seconds)
        step = float(payload["check_ms"]) / 1000
        while (left := deadline - time.monotonic()) > 0:
            if step:
                ctx.check()
            time.sleep(min(left, step or 0.05))
    except BaseException as exc:
        how = type(exc).__name__
        raise
    finally:
        r.rpush(log, f"exit {ctx.task_id} {ctx.worker} {int(time.time() * 1000)} {how}")


@handler("announced")
def announced(payload: dict[str, Any], ctx: TaskContext) -> None:
    """Payload {"k": key, "queues": [names]}: records, in the hash <k>, each queue's announced
    handlers while this worker runs ("<queue>" -> "<worker>:<handler> ..." sorted)."""
    from core.queue import Queue, handlers

    r = ctx.queue.redis
    for name in payload["queues"]:
        offered = handlers.known(Queue(r, name, prefix=ctx.queue.keys.prefix))
        r.hset(payload["k"], name, " ".join(f"{o.worker}:{n}" for n, o in offered.items()))


@handler("otel_modules")
def otel_modules(payload: dict[str, Any], ctx: TaskContext) -> list[str]:
    """The OpenTelemetry and core.tracing modules this worker process has imported (issue 38:
    with tracing off, no more than redis-py imports itself)."""
    import sys

    return sorted(m for m in sys.modules if m.startswith(("opentelemetry", "core.tracing")))


@handler("gc_frozen")
def gc_frozen(payload: dict[str, Any], ctx: TaskContext) -> int:
    """How many objects this worker process keeps out of the garbage collector's sight."""
    import gc

    return gc.get_freeze_count()

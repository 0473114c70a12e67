"""What tasks report while they run (ctx.progress, ctx.log): of one request, of some tasks,
of the running tasks of many requests."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..base import QueueBase, translated
from ..keys import GROUP, validate_id, validate_task_id
from ..models import LogLine, TaskProgress
from .common import json_of, redis_of


def progress(q: QueueBase, request_id: str) -> list[TaskProgress]:
    """What the request's tasks last reported (ctx.progress, ctx.log), most recent first,
    each marked running or not: at most the 64 tasks that reported last (the engine keeps no
    more), so two round trips whatever the request's size."""
    rid = validate_id(request_id, "request id")
    with translated("progress"):
        pipe = redis_of(q).pipeline(transaction=False)
        pipe.hgetall(q.keys.progress(rid)).zrange(q.keys.progress_at(rid), 0, -1, desc=True,
                                                  withscores=True)
        fields, order = pipe.execute()
        # Which of them are leased now: their pending entry's holder is a worker.
        pipe = redis_of(q).pipeline(transaction=False)
        for tid, _ in order:
            pipe.xpending_range(q.keys.tasks(rid), "g", tid, tid, 1)
        held = pipe.execute(raise_on_error=False) if order else []
    running = {tid for (tid, _), rows in zip(order, held, strict=True)
               if isinstance(rows, list) and rows and not rows[0]["consumer"].startswith("~")}
    return [progress_of(tid, fields.get(tid), fields.get(f"{tid}:log"), int(at), tid in running)
            for tid, at in order]


def task_progress(
    q: QueueBase, tasks: list[tuple[str, str]]
) -> dict[tuple[str, str], TaskProgress]:
    """The last progress of these (request id, task id) pairs, those that reported any (one
    round trip): what the workers page shows of the tasks each worker says it runs (their
    `running` is not looked up: False)."""
    pairs = [(validate_id(rid, "request id"), validate_task_id(tid)) for rid, tid in tasks]
    if not pairs:
        return {}
    with translated("task progress"):
        pipe = redis_of(q).pipeline(transaction=False)
        for rid, tid in pairs:
            pipe.hmget(q.keys.progress(rid), [tid, f"{tid}:log"])
            pipe.zscore(q.keys.progress_at(rid), tid)
        got = pipe.execute()
    out = {}
    for i, (rid, tid) in enumerate(pairs):
        (text, log), at = got[2 * i], got[2 * i + 1]
        if at is not None:
            out[(rid, tid)] = progress_of(tid, text, log, int(at))
    return out


RUNNING_READ = 64  # running tasks of one request whose progress is read (the engine keeps 64)


def running_progress(q: QueueBase, request_ids: list[str]) -> dict[str, list[TaskProgress]]:
    """What the running tasks of these requests last reported (ctx.progress), marked running,
    for those that reported any: the holders of each request's pending entries (XPENDING's
    summary), each holder's entries, then their reports. Three pipelined round trips however
    many requests, at most RUNNING_READ tasks each: the requests list's progress bars."""
    ids = [validate_id(rid, "request id") for rid in request_ids]
    if not ids:
        return {}
    k, r = q.keys, redis_of(q)
    with translated("running progress"):
        pipe = r.pipeline(transaction=False)
        for rid in ids:
            pipe.xpending(k.tasks(rid), GROUP)
        summaries = pipe.execute(raise_on_error=False)
        pipe = r.pipeline(transaction=False)
        asked = []
        for rid, summary in zip(ids, summaries, strict=True):
            left = RUNNING_READ
            for c in summary.get("consumers") or [] if isinstance(summary, dict) else []:
                n = min(int(c["pending"]), left)
                if str(c["name"]).startswith("~") or n <= 0:
                    continue  # parked: waiting again, in backoff, dead
                pipe.xpending_range(k.tasks(rid), GROUP, "-", "+", n, consumername=c["name"])
                asked.append(rid)
                left -= n
        held = pipe.execute(raise_on_error=False) if asked else []
    pairs = [(rid, row["message_id"]) for rid, rows in zip(asked, held, strict=True)
             if isinstance(rows, list) for row in rows]
    found = task_progress(q, pairs)
    out: dict[str, list[TaskProgress]] = {}
    for pair in pairs:
        if (p := found.get(pair)) is not None:
            out.setdefault(pair[0], []).append(replace(p, running=True))
    return out


def progress_of(tid: str, text: str | None, log: str | None, at: int,
                running: bool = False) -> TaskProgress:
    """One task's entry as the engine wrote it (progress.lua); an odd one reads as empty."""
    p: Any = json_of(text, dict) or {}
    lines = json_of(log, list) or []

    def num(v: Any) -> float | None:
        return v if isinstance(v, int | float) and not isinstance(v, bool) else None

    return TaskProgress(
        task_id=tid, done=num(p.get("done")), total=num(p.get("total")),
        message=str(p.get("msg") or ""), worker=str(p.get("worker") or ""), updated_ms=at,
        log=tuple(LogLine(int(e[0]), str(e[1])) for e in lines
                  if isinstance(e, list) and len(e) == 2 and num(e[0]) is not None),
        running=running,
    )

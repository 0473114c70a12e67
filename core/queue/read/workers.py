"""Workers: a page of the registry, one worker, its heartbeat, and those an operator stopped."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..base import QueueBase, int_in, translated
from ..keys import validate_id
from ..models import Page, PageCursor, WorkerInfo
from .common import MAX_PAGE, redis_of
from .paging import page


def heartbeat(q: QueueBase, worker: str) -> tuple[int | None, str | None]:
    """A worker's last heartbeat (ms on the Redis clock; None: not registered) and its info
    (JSON text as the worker wrote it, not trusted)."""
    with translated("worker"):
        beat, info = (redis_of(q).pipeline(transaction=False).zscore(q.keys.workers, worker)
                      .hget(q.keys.worker(worker), "info").execute())
    return (None if beat is None else int(beat)), info


def workers(q: QueueBase, *, after: PageCursor | None = None, limit: int = 50) -> Page[WorkerInfo]:
    """A page of registered workers, most recent heartbeat first; pass the returned cursor as
    `after` for the next page. Workers gone longer than prune.WORKER_RETENTION_MS are pruned
    by the reaper; until then they are listed with their last beat (and empty info once
    their entry has expired)."""
    with translated("workers"):
        rows, cursor = page(q, q.keys.workers, after, limit)
        pipe = redis_of(q).pipeline(transaction=False)
        for name, _ in rows:
            pipe.hmget(q.keys.worker(name), "info", "control")
        infos = pipe.execute()
    items = [worker_of(name, score, info, control or "")
             for (name, score), (info, control) in zip(rows, infos, strict=True)]
    return Page(items, cursor)


def worker(q: QueueBase, name: str) -> WorkerInfo | None:
    """One registered worker's entry, or None if `name` is not in the queue's registry."""
    validate_id(name, "worker name")
    with translated("worker"):
        score, (info, control) = (redis_of(q).pipeline(transaction=False)
                                  .zscore(q.keys.workers, name)
                                  .hmget(q.keys.worker(name), "info", "control").execute())
    return None if score is None else worker_of(name, int(score), info, control or "")


@dataclass(frozen=True)
class StoppedWorker:
    """A worker an operator stopped that has exited (Consumer.unregister(stopped=True)): its
    last info, who asked it to stop and when, and when it exited."""

    name: str
    stopped_ms: int
    by: str  # "" when not said
    asked_ms: int | None
    info: dict[str, Any]  # its last heartbeat's ({} if not a JSON object)


STOPPED_FIELDS = ("info", "control_by", "control_ms", "stopped_ms")


def stopped_workers(q: QueueBase, *, limit: int = 50) -> list[StoppedWorker]:
    """The workers an operator stopped that have exited, the last stopped first (two round
    trips); those whose entry has expired are left out."""
    int_in(limit, "limit", 1, MAX_PAGE)
    with translated("stopped workers"):
        rows = redis_of(q).zrange(q.keys.stopped_workers, 0, limit - 1, desc=True, withscores=True)
        return stopped_of(q, rows, stopped_entries(q, rows))


def stopped_entries(q: QueueBase, rows: list[tuple[str, float]]) -> list[Any]:
    pipe = redis_of(q).pipeline(transaction=False)
    for name, _ in rows:
        pipe.hmget(q.keys.worker(name), *STOPPED_FIELDS)
    return list(pipe.execute()) if rows else []


def stopped_of(
    q: QueueBase, rows: list[tuple[str, float]], entries: list[Any]
) -> list[StoppedWorker]:
    out = []
    for (name, score), (text, by, asked, at) in zip(rows, entries, strict=True):
        if text is None and by is None and at is None:
            continue  # its entry expired (or a worker of that name started again)
        info = worker_of(name, int(score), text).info
        out.append(StoppedWorker(name, int(at) if str(at or "").isdecimal() else int(score),
                                 str(by or ""),
                                 int(asked) if str(asked or "").isdecimal() else None, info))
    return out


def worker_of(name: str, score: int, text: str | None, control: str = "") -> WorkerInfo:
    """A registry entry as its worker wrote it: an entry that is not a JSON object (another
    client's, a broken writer's) is kept as text, so one odd worker breaks no reader."""
    if not text:
        return WorkerInfo(name, score, {}, control=control)
    try:
        info = json.loads(text)
    except ValueError:
        info = None
    if isinstance(info, dict):
        return WorkerInfo(name, score, info, control=control)
    return WorkerInfo(name, score, {}, text, control=control)

"""Workers: each registered worker, judged against its own --dead-after: alive (beat within
half of it; workers beat every fifth), stale (late, not yet dead), gone (past it: its leases
are up for reaping; or its registry entry expired)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from django.http import HttpRequest, HttpResponse

from core.console.paging import Paged, zset_cursor
from core.console.queues import queue_from
from core.queue import introspect
from core.queue.models import WorkerInfo

from .common import console_page, page

DEFAULT_DEAD_AFTER_MS = 10_000  # runworker's default --dead-after


@dataclass(frozen=True)
class Task:
    queue: str
    request_id: str
    task_id: str
    since_ms: int | None


@dataclass(frozen=True)
class Worker:
    name: str
    state: str
    beat_ms: int
    age_ms: int
    dead_after_ms: int
    host: str
    pid: str
    queues: str
    slots: str
    started_ms: int | None
    processed: int | None
    failed: int | None
    running: int | None
    version: str
    stopping: bool
    tasks: list[Task]
    held_here: int = 0  # its tasks of the page's queue: what "release its tasks" acts on

    @classmethod
    def of(cls, w: WorkerInfo, now_ms: int) -> Worker:
        info: dict[str, Any] = w.info if isinstance(w.info, dict) else {}
        dead_after = _int(info.get("dead_after_ms")) or DEFAULT_DEAD_AFTER_MS
        age = max(0, now_ms - w.last_beat_ms)
        if not info or age >= dead_after:
            state = "gone"
        elif age >= dead_after / 2:
            state = "stale"
        else:
            state = "alive"
        queues = info.get("queues", "")
        tasks = []
        for t in info.get("tasks") or []:
            if isinstance(t, dict):
                tasks.append(Task(str(t.get("queue", "")), str(t.get("request", "")),
                                  str(t.get("task", "")), _int(t.get("since"))))
        started = _int(info.get("started"))
        return cls(
            name=w.name, state=state, beat_ms=w.last_beat_ms, age_ms=age,
            dead_after_ms=dead_after, host=str(info.get("host", "")),
            pid=str(info.get("pid", "")),
            queues=", ".join(map(str, queues)) if isinstance(queues, list) else str(queues),
            slots=str(info.get("slots", "")),
            started_ms=started * 1000 if started else None,
            processed=_int(info.get("processed")), failed=_int(info.get("failed")),
            running=_int(info.get("running")), version=str(info.get("version", "")),
            stopping=bool(info.get("stopping")), tasks=tasks,
        )


def _int(value: Any) -> int | None:
    try:
        return int(value) if value is not None and value != "" else None
    except (TypeError, ValueError):
        return None


@console_page
def worker_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    after = zset_cursor(request)
    got = introspect.workers(queue, after=after, limit=50)
    now = queue.now_ms()
    workers = [Worker.of(w, now) for w in got.items]
    workers = [replace(w, held_here=sum(1 for t in w.tasks if t.queue == queue.name))
               for w in workers]
    context = {
        "workers": workers,
        "paged": Paged(workers, str(got.cursor) if got.cursor else None, after is None),
        "counts": {s: sum(1 for w in workers if w.state == s) for s in ("alive", "stale", "gone")},
    }
    return page(request, "core/workers.html", queue, context, nav="workers")

"""Workers: each registered worker, judged against its own --dead-after: alive (beat within
half of it; workers beat every fifth), stale (late, not yet dead), gone (past it: its leases
are up for reaping; or its registry entry expired); and under them the workers an operator
stopped, which have exited: stopped, by whom and when, until their stack restarts."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, replace
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from core.conf import get_queue
from core.console.aggregates import LIVE_WORKER_MS, QueueSummary
from core.console.paging import Paged, zset_cursor
from core.console.queues import queue_from, queue_names
from core.queue import read
from core.queue.errors import InvalidInput
from core.queue.keys import validate_id, validate_task_id
from core.queue.models import TaskProgress, WorkerInfo
from core.queue.read import StoppedWorker

from .common import console_page, page

DEFAULT_DEAD_AFTER_MS = 10_000  # runworker's default --dead-after


SHOWN_CHARS = 200  # of a heartbeat's odd text, on the page
STOPPED_SHOWN = 50  # workers an operator stopped, listed under the registry's first page


@dataclass(frozen=True)
class Task:
    """A task a worker's heartbeat says it runs, as it says it: `url` (its request's page)
    and `held` ("<request>/<task>", what the release form posts) only when the entry names
    a queue, a request and a task that are ids; otherwise the page shows it as text."""

    queue: str
    request_id: str
    task_id: str
    since_ms: int | None
    url: str | None = None
    held: str | None = None
    progress: TaskProgress | None = None  # what it last reported (ctx.progress), if anything

    @classmethod
    def of(cls, entry: Any) -> Task:
        if not isinstance(entry, dict):
            return cls("", _text(json.dumps(entry, default=str)), "", None)
        queue, rid, tid = (_text(entry.get(k)) for k in ("queue", "request", "task"))
        url = held = None
        try:
            validate_id(queue, "queue name")
            validate_id(rid, "request id")
        except InvalidInput:
            pass
        else:
            url = reverse("core:request", args=[queue, rid])
            with contextlib.suppress(InvalidInput):
                held = f"{rid}/{validate_task_id(tid)}"
        return cls(queue, rid, tid, _int(entry.get("since")), url, held)


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
    quiet: bool = False  # it said so in its last beat (an operator's quiet)
    control: str = ""  # what an operator asked of it: "quiet", "stop" or "" (see core.ops.workers)
    rss_bytes: int | None = None
    cpu_pct: float | None = None  # CPU time over the last minute, % of one core
    util_pct: float | None = None  # busy slot time over the last minute, % of its slots
    held_here: int = 0  # its tasks of the page's queue: what "release its tasks" acts on
    unreadable: str = ""  # its heartbeat's entry, when that is not a JSON object
    stopped_ms: int | None = None  # an operator stopped it, and it exited then
    stopped_by: str = ""

    @classmethod
    def of(cls, w: WorkerInfo, now_ms: int) -> Worker:
        info: dict[str, Any] = w.info if isinstance(w.info, dict) else {}
        dead_after = dead_after_of(info)
        age = max(0, now_ms - w.last_beat_ms)
        if (not info and not w.unreadable) or age >= dead_after:
            state = "gone"  # its entry expired, or it is past its --dead-after
        elif age >= dead_after / 2:
            state = "stale"
        else:
            state = "alive"
        queues = info.get("queues", "")
        listed = info.get("tasks") or []
        tasks = [Task.of(t) for t in (listed if isinstance(listed, list) else [listed])]
        started = _int(info.get("started"))
        return cls(
            name=w.name, state=state, beat_ms=w.last_beat_ms, age_ms=age,
            dead_after_ms=dead_after, host=_text(info.get("host")),
            pid=_text(info.get("pid")),
            queues=_text(", ".join(map(str, queues)) if isinstance(queues, list) else queues),
            slots=_text(info.get("slots")),
            started_ms=started * 1000 if started else None,
            processed=_int(info.get("processed")), failed=_int(info.get("failed")),
            running=_int(info.get("running")), version=_text(info.get("version")),
            stopping=bool(info.get("stopping")), tasks=tasks,
            unreadable=_text(w.unreadable), quiet=info.get("quiet") is True,
            control=w.control if w.control in ("quiet", "stop") else "",
            rss_bytes=_int(info.get("rss")), cpu_pct=_pct(info.get("cpu")),
            util_pct=_pct(info.get("util")),
        )

    @classmethod
    def stopped(cls, s: StoppedWorker, now_ms: int) -> Worker:
        """A worker an operator stopped, since exited: as its last heartbeat said, with who
        stopped it and when."""
        w = cls.of(WorkerInfo(s.name, s.stopped_ms, s.info, control="stop"), now_ms)
        # What it last said of its load is not its load: it runs no more.
        return replace(w, state="stopped", stopping=False, quiet=False, control="", tasks=[],
                       running=None, rss_bytes=None, cpu_pct=None, util_pct=None,
                       stopped_ms=s.stopped_ms, stopped_by=_text(s.by) or "an operator")

    @property
    def controllable(self) -> bool:
        """Whether the control buttons apply: it beats (not gone or stopped) and is not
        stopping."""
        return (self.state not in ("gone", "stopped") and not self.stopping
                and self.control != "stop")

    @property
    def quieted(self) -> bool:
        """Quiet, or asked to be: Resume is the button then, not Quiet."""
        return self.quiet or self.control == "quiet"

    @property
    def rss_text(self) -> str:
        if self.rss_bytes is None:
            return "—"
        mib = self.rss_bytes / 2**20
        return f"{mib / 1024:.1f} GiB" if mib >= 1000 else f"{mib:,.0f} MiB"


def dead_after_of(info: Any) -> int:
    """A heartbeat's --dead-after (ms), or runworker's default where it gives none usable."""
    n = _int(info.get("dead_after_ms")) if isinstance(info, dict) else None
    return n if n is not None and n > 0 else DEFAULT_DEAD_AFTER_MS


def _int(value: Any) -> int | None:
    """A heartbeat's number, or None if it is none a page can show (text, a list, Infinity,
    beyond 64 bits)."""
    try:
        n = int(value) if value is not None and value != "" else None
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n is None or abs(n) < 2**63 else None


def _pct(value: Any) -> float | None:
    """A heartbeat's percentage, or None if it is not a finite number from 0 to 10,000."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if 0 <= value <= 10_000 else None


def _text(value: Any) -> str:
    """A heartbeat's value as text, cut to what a cell shows."""
    text = "" if value is None else str(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS] + "…"


@console_page
def worker_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    after = zset_cursor(request)
    # The page and the queue's strip over it: one read (read.WorkersView).
    view = read.workers_view(queue, after=after, limit=50, stopped=STOPPED_SHOWN,
                             worker_timeout_ms=LIVE_WORKER_MS)
    now = view.now_ms
    got = view.workers
    workers = [Worker.of(w, now) for w in got.items]
    workers = [replace(w, held_here=sum(1 for t in w.tasks if t.queue == queue.name and t.held))
               for w in workers]
    workers = _with_progress(workers)
    stopped = [Worker.stopped(s, now) for s in view.stopped]
    context = {
        "workers": workers + stopped,
        "paged": Paged(workers, str(got.cursor) if got.cursor else None, after is None),
        "counts": {s: sum(1 for w in workers + stopped if w.state == s)
                   for s in ("alive", "stale", "gone", "stopped")},
        "summary": QueueSummary(queue.name, view.stats, now, view.registered_workers,
                                view.expired_leases, None),
    }
    return page(request, "core/workers.html", queue, context, nav="workers")


def _with_progress(workers: list[Worker]) -> list[Worker]:
    """Each listed task with what it last reported: one round trip per queue named (a worker
    may serve several), for the tasks whose ids are ids."""
    wanted: dict[str, list[tuple[str, str]]] = {}
    known = set(queue_names())
    for w in workers:
        for t in w.tasks:
            if t.held and t.queue in known:
                wanted.setdefault(t.queue, []).append((t.request_id, t.task_id))
    if not wanted:
        return workers
    found = {(name, *key): p for name, pairs in wanted.items()
             for key, p in read.task_progress(get_queue(name), pairs).items()}
    return [replace(w, tasks=[replace(t, progress=found.get((t.queue, t.request_id, t.task_id)))
                              for t in w.tasks]) for w in workers]

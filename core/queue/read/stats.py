"""A queue's figures: its depths, requests per state and live workers (stats), what the
overview flags beside them (attention), whether it is drained, and the queues there are."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .. import registry
from ..base import QueueBase, int_in, translated
from ..models import STATES
from .common import MAX_PAGE, redis_of

SCHED_MARK = "~scheduled"  # the scheduled requests' head in `delayed` (see lua/_base.lua)
HOUR_MS = 3_600_000


@dataclass(frozen=True)
class QueueStats:
    queue: str
    waiting: int
    waiting_by_priority: dict[int, int]
    leased: int
    delayed: int
    dead: int
    requests_by_state: dict[str, int]
    workers: int
    totals: dict[str, int] = field(default_factory=dict)
    paused: bool = False  # Operator.pause(): workers lease nothing from it
    scheduled: int = 0  # delayed requests waiting for their due time
    due_next_hour: int = 0  # of them, those due within the hour (or overdue, not yet promoted)
    waiting_by_handler: dict[str, int] = field(default_factory=dict)
    # Handlers that live workers run now (their announcements: handlers.py).
    handlers_run: frozenset[str] = frozenset()

    @property
    def unrunnable(self) -> dict[str, int]:
        """Waiting tasks by handler, of the handlers that no live worker runs: they wait for a
        worker that runs them (none is leased to a worker without the handler)."""
        return {h: n for h, n in self.waiting_by_handler.items()
                if n > 0 and h not in self.handlers_run}

    @property
    def waiting_no_worker(self) -> int:
        """How many tasks wait for a handler that no live worker runs (unrunnable's sum)."""
        return sum(self.unrunnable.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "waiting": self.waiting,
            "waiting_by_priority": {str(k): v for k, v in self.waiting_by_priority.items()},
            "leased": self.leased,
            "delayed": self.delayed,
            "dead": self.dead,
            "requests": self.requests_by_state,
            "workers": self.workers,
            "totals": self.totals,
            "paused": self.paused,
            "scheduled": self.scheduled,
            "due_next_hour": self.due_next_hour,
            "waiting_by_handler": self.waiting_by_handler,
            "waiting_no_worker": self.unrunnable,
        }


def queues(client: Any, *, prefix: str = "qa") -> list[str]:
    """Every queue under `prefix` that a producer or worker has used, sorted by name; one
    command (the registry zset, see registry.py), never KEYS or SCAN."""
    return registry.names(client, prefix=prefix)


def queues_beside(q: QueueBase) -> list[str]:
    """queues() of `q`'s Redis and prefix, for a caller that holds a queue, not a client."""
    return registry.names(q.redis, prefix=q.keys.prefix)


def stats(q: QueueBase, *, worker_timeout_ms: int = 15_000) -> QueueStats:
    """Depths (waiting per priority, leased, delayed, dead), requests per state, live workers."""
    now = q.now_ms()
    with translated("stats"):
        pipe = redis_of(q).pipeline(transaction=False)
        stats_read(q, pipe, now, worker_timeout_ms)
        r = pipe.execute()
    return stats_of(q, r, now)


STATS_REPLIES = 10 + len(STATES)  # what stats_read() adds to a pipeline


def stats_read(q: QueueBase, pipe: Any, now: int, worker_timeout_ms: int) -> None:
    """Add the commands of stats() to `pipe` (STATS_REPLIES of them)."""
    k = q.keys
    pipe.hgetall(k.stats).zcard(k.leases).zcard(k.delayed).xlen(k.dead)
    for s in STATES:
        pipe.zcard(k.state_index(s))
    pipe.zcount(k.workers, now - worker_timeout_ms, "+inf")
    pipe.exists(k.paused)
    pipe.zscore(k.delayed, SCHED_MARK).zcard(k.scheduled)
    pipe.zcount(k.scheduled, "-inf", now + HOUR_MS)
    pipe.zrange(k.handlers, now, "+inf", byscore=True)


def waiting_counts(raw: dict[str, str]) -> tuple[dict[int, int], dict[str, int]]:
    """Waiting tasks by priority and by handler, from the stats' "w:<prio>:<handler>" fields
    (and "w:<prio>", an engine's before issue 33, until upgrade.lua recounts them)."""
    by_prio: dict[int, int] = {}
    by_handler: dict[str, int] = {}
    for f, v in raw.items():
        if not f.startswith("w:") or not int(v):
            continue
        prio, _, handler = f[2:].partition(":")
        by_prio[int(prio)] = by_prio.get(int(prio), 0) + int(v)
        if handler:
            by_handler[handler] = by_handler.get(handler, 0) + int(v)
    return ({p: n for p, n in by_prio.items() if n},
            dict(sorted((h, n) for h, n in by_handler.items() if n)))


def stats_of(q: QueueBase, r: list[Any], now: int) -> QueueStats:
    """The replies of stats_read()'s commands as QueueStats."""
    mark, scheduled, due_soon, announced = r[-4:]
    r = r[:-4]
    raw: dict[str, str] = r[0]
    by_prio, by_handler = waiting_counts(raw)
    return QueueStats(
        queue=q.name,
        waiting=sum(by_prio.values()),
        waiting_by_priority=dict(sorted(by_prio.items(), reverse=True)),
        leased=r[1],
        delayed=r[2] - (mark is not None),  # retries: the mark is not one
        dead=r[3],
        requests_by_state=dict(zip(STATES, r[4 : 4 + len(STATES)], strict=True)),
        workers=r[-2],
        totals=totals_of(raw),
        paused=bool(r[-1]),
        scheduled=scheduled,
        due_next_hour=due_soon,
        waiting_by_handler=by_handler,
        handlers_run=frozenset(str(m).partition("|")[0] for m in announced),
    )


def totals(q: QueueBase) -> dict[str, int]:
    """The queue's cumulative counters (submitted, done, failed, retried...): one command,
    cheap enough to poll."""
    with translated("totals"):
        raw: dict[str, str] = redis_of(q).hgetall(q.keys.stats)
    return totals_of(raw)


def totals_of(raw: dict[str, str]) -> dict[str, int]:
    """The cumulative counters of the stats hash (its other fields count waiting tasks)."""
    return {f: int(v) for f, v in raw.items() if not f.startswith("w:")}


def drained(q: QueueBase, handlers: Iterable[str] | None = None) -> bool:
    """True when nothing in the queue is waiting, delayed (a retry or a scheduled request)
    or leased (a lease an operator revoked included: its task moves on once its old run is
    over). With `handlers`, waiting tasks of other handlers do not count: a worker that does
    not run them would wait for them for ever."""
    with translated("drained"):
        stats, leased, delayed, revoked, mark, scheduled = (
            redis_of(q).pipeline(transaction=False)
            .hgetall(q.keys.stats).zcard(q.keys.leases).zcard(q.keys.delayed)
            .zcard(q.keys.revoked).zscore(q.keys.delayed, SCHED_MARK).zcard(q.keys.scheduled)
            .execute()
        )
    by_prio, by_handler = waiting_counts(stats)
    waiting = (sum(by_prio.values()) if handlers is None
               else sum(by_handler.get(h, 0) for h in set(handlers)))
    delayed -= mark is not None
    return waiting == 0 and leased == 0 and delayed == 0 and revoked == 0 and scheduled == 0


@dataclass(frozen=True)
class Attention:
    """What the console's overview flags beside the queue's counters."""

    now_ms: int
    registered_workers: int  # in the registry, live or not
    expired_leases: int  # past their expiry, not reaped yet
    oldest_waiting_ms: int | None  # creation time of the oldest active request with work
    # waiting (among the `checked` oldest active ones); None if none of them waits


def attention(q: QueueBase, *, checked: int = 20) -> Attention:
    """Two round trips: the registry's size, the expired leases, the oldest active
    requests, then whether those have work waiting."""
    k, r = q.keys, redis_of(q)
    n = int_in(checked, "checked", 1, MAX_PAGE)
    with translated("attention"):
        now = q.now_ms()
        pipe = r.pipeline(transaction=False)
        pipe.zcard(k.workers)
        pipe.zcount(k.leases, "-inf", f"({now}")
        pipe.zrange(k.state_index("active"), 0, n - 1)
        registered, expired, oldest = pipe.execute()
        oldest_waiting = None
        if oldest:
            pipe = r.pipeline(transaction=False)
            for rid in oldest:
                pipe.hmget(k.request(rid), "waiting", "delayed", "created_ms")
            for waiting, delayed, created in pipe.execute():
                if int(waiting or 0) + int(delayed or 0) > 0 and created:
                    oldest_waiting = int(created)
                    break
    return Attention(now, int(registered), int(expired), oldest_waiting)

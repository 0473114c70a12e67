"""Read-only views of a queue for the console and `queuestat`: indexes only, no KEYS/SCAN."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import redis

from .client import Queue, translated
from .keys import validate_id
from .models import STATES, DeadLetter, PendingEntry, RequestInfo, WorkerInfo


def _r(q: Queue) -> Any:
    """The queue's client, untyped: redis-py types replies as bytes | str whatever the
    connection decodes; ours always decodes to str."""
    return q.redis


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
        }


def stats(q: Queue, *, worker_timeout_ms: int = 15_000) -> QueueStats:
    """Depths (waiting per priority, leased, delayed, dead), requests per state, live workers."""
    k = q.keys
    now = q.now_ms()
    with translated("stats"):
        pipe = _r(q).pipeline(transaction=False)
        pipe.hgetall(k.stats).zcard(k.leases).zcard(k.delayed).xlen(k.dead)
        for s in STATES:
            pipe.zcard(k.state_index(s))
        pipe.zcount(k.workers, now - worker_timeout_ms, "+inf")
        r = pipe.execute()
    raw: dict[str, str] = r[0]
    by_prio = {int(f[2:]): int(v) for f, v in raw.items() if f.startswith("w:") and int(v)}
    totals = {f: int(v) for f, v in raw.items() if not f.startswith("w:")}
    return QueueStats(
        queue=q.name,
        waiting=sum(by_prio.values()),
        waiting_by_priority=dict(sorted(by_prio.items(), reverse=True)),
        leased=r[1],
        delayed=r[2],
        dead=r[3],
        requests_by_state=dict(zip(STATES, r[4 : 4 + len(STATES)], strict=True)),
        workers=r[-1],
        totals=totals,
    )


def request(q: Queue, request_id: str) -> RequestInfo | None:
    """One request's metadata and counters, or None if unknown."""
    rid = validate_id(request_id, "request id")
    with translated("request"):
        h = _r(q).hgetall(q.keys.request(rid))
    return RequestInfo.from_hash(rid, h) if h else None


def requests(
    q: Queue, state: str, *, after: float | None = None, limit: int = 50
) -> tuple[list[RequestInfo], float | None]:
    """A page of requests in `state`, newest first; pass the returned cursor as `after`."""
    if state not in STATES:
        raise ValueError(f"unknown state {state!r}; one of {', '.join(STATES)}")
    top = "+inf" if after is None else f"({after}"
    with translated("requests"):
        rows = _r(q).zrange(
            q.keys.state_index(state),
            top,
            "-inf",
            byscore=True,
            desc=True,
            offset=0,
            num=limit + 1,
            withscores=True,
        )
        page = rows[:limit]
        pipe = _r(q).pipeline(transaction=False)
        for rid, _ in page:
            pipe.hgetall(q.keys.request(rid))
        hashes = pipe.execute()
    out = [RequestInfo.from_hash(rid, h) for (rid, _), h in zip(page, hashes, strict=True) if h]
    cursor = page[-1][1] if len(rows) > limit else None
    return out, cursor


def pending(q: Queue, request_id: str, *, after: str = "-", count: int = 50) -> list[PendingEntry]:
    """A page of a request's pending entries: leased tasks with their lease expiry, and
    parked ones (consumer "~waiting", "~delayed" or "~dead")."""
    rid = validate_id(request_id, "request id")
    start = after if after == "-" else f"({after}"
    with translated("pending"):
        try:
            rows = _r(q).xpending_range(q.keys.tasks(rid), "g", start, "+", count)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            return []  # a finished request's stream is gone: nothing is pending
        pipe = _r(q).pipeline(transaction=False)
        for r in rows:
            pipe.zscore(q.keys.leases, f"{rid}/{r['message_id']}/{r['times_delivered']}")
        expiries = pipe.execute()
    return [
        PendingEntry(
            task_id=r["message_id"],
            consumer=r["consumer"],
            idle_ms=int(r["time_since_delivered"]),
            deliveries=int(r["times_delivered"]),
            lease_expires_ms=int(e) if e is not None else None,
        )
        for r, e in zip(rows, expiries, strict=True)
    ]


def dead_letters(q: Queue, *, before: str | None = None, count: int = 50) -> list[DeadLetter]:
    """A page of dead letters, newest first; pass the last id as `before` for the next."""
    top = "+" if before is None else f"({before}"
    with translated("dead_letters"):
        rows = _r(q).xrevrange(q.keys.dead, top, "-", count=count)
    return [DeadLetter.from_entry(eid, f) for eid, f in rows]


def workers(q: Queue) -> list[WorkerInfo]:
    """Registered workers, most recent heartbeat first."""
    with translated("workers"):
        rows = _r(q).zrange(q.keys.workers, 0, -1, desc=True, withscores=True)
        pipe = _r(q).pipeline(transaction=False)
        for name, _ in rows:
            pipe.hget(q.keys.worker(name), "info")
        infos = pipe.execute()
    return [
        WorkerInfo(name, int(score), json.loads(info) if info else {})
        for (name, score), info in zip(rows, infos, strict=True)
    ]


def drained(q: Queue) -> bool:
    """True when nothing in the queue is waiting, delayed or leased."""
    with translated("drained"):
        stats, leased, delayed = (
            _r(q).pipeline(transaction=False)
            .hgetall(q.keys.stats).zcard(q.keys.leases).zcard(q.keys.delayed).execute()
        )
    waiting = sum(int(v) for k, v in stats.items() if k.startswith("w:"))
    return waiting == 0 and leased == 0 and delayed == 0

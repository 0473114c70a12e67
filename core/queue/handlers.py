"""Which handlers a queue's live workers run: each worker announces its handler names per
queue when it starts, and its heartbeat renews them, so producers can tell a typo (or a
handler nobody runs now) from a real one, the console can say which waiting work no live
worker can run, and a dequeue leases a worker only the tasks of handlers it runs.

One zset per queue (QueueKeys.handlers): "<handler>|<worker>" -> until when that worker is
presumed alive (ms). The worker's hash keeps the list (field "handlers"), which each heartbeat
(extend.lua) renews for one lease length; a worker that stops withdraws it (unregister), and
one that dies lets it lapse with its heartbeat.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .base import QueueBase, translated
from .keys import validate_id
from .models import HandlerOffer

ANNOUNCED_MS = 60_000  # an announcement no heartbeat renews lives this long


def announce(queue: QueueBase, worker: str, names: Iterable[str], *,
             live_ms: int = ANNOUNCED_MS) -> None:
    """Record that `worker` runs the handlers `names` for `queue`, for `live_ms` unless its
    heartbeat (Consumer.heartbeat) renews them; names it announced before and no longer runs
    are withdrawn. Two round trips."""
    validate_id(worker, "worker name")
    offered = sorted({validate_id(n, "handler name") for n in names})
    until = queue.now_ms() + live_ms
    key, wk = queue.keys.handlers, queue.keys.worker(worker)
    with translated("announce handlers"):
        before = str(queue.redis.hget(wk, "handlers") or "").split()
        pipe = queue.redis.pipeline(transaction=True)
        gone = [f"{n}|{worker}" for n in before if n not in offered]
        if gone:
            pipe.zrem(key, *gone)
        if offered:
            pipe.hset(wk, "handlers", " ".join(offered))
            pipe.zadd(key, {f"{n}|{worker}": until for n in offered})
        else:
            pipe.hdel(wk, "handlers")
        pipe.execute()


def withdraw(queue: QueueBase, worker: str) -> None:
    """Take back what `worker` announced (a worker that stops)."""
    validate_id(worker, "worker name")
    with translated("withdraw handlers"):
        names = str(queue.redis.hget(queue.keys.worker(worker), "handlers") or "").split()
        if names:
            queue.redis.zrem(queue.keys.handlers, *(f"{n}|{worker}" for n in names))


def known(queue: QueueBase) -> dict[str, HandlerOffer]:
    """Every handler a live worker of `queue` runs, by name (sorted), with the worker whose
    announcement lasts longest and until when. One round trip."""
    found: dict[str, HandlerOffer] = {}
    for member, until in _live(queue):
        name, _, worker = member.partition("|")
        if name not in found or until > found[name].live_until_ms:
            found[name] = HandlerOffer(name, until, worker)
    return dict(sorted(found.items()))


def names(queue: QueueBase) -> set[str]:
    """The names alone: what a producer checks a submit against."""
    return {member.partition("|")[0] for member, _ in _live(queue)}


def _live(queue: QueueBase) -> list[tuple[str, int]]:
    """The announcements not past their time on the Redis server's clock: (member, until ms).
    Two round trips (TIME cannot share a pipeline on a cluster)."""
    now = queue.now_ms()
    with translated("known handlers"):
        rows: Any = queue.redis.zrange(queue.keys.handlers, now, "+inf", byscore=True,
                                       withscores=True)
    return [(str(m), int(s)) for m, s in rows]

"""A queue's limits (core.queue.limits) with their use now: how many tasks each holds against
its concurrency and how many started within its window. Two round trips."""

from __future__ import annotations

from ..base import QueueBase, translated
from ..limits import limit_of
from ..models import LimitUse


def limits(q: QueueBase) -> list[LimitUse]:
    """Every limit of the queue, by name, with its use (a concurrency count may include
    leases that ended since the set was last full: the engine prunes it when it is)."""
    now = q.now_ms()
    with translated("limits"):
        raw: dict[str, str] = q.redis.hgetall(q.keys.limits)
        kept = sorted((n, lim) for n, s in raw.items() if (lim := limit_of(n, s)) is not None)
        if not kept:
            return []
        pipe = q.redis.pipeline(transaction=False)
        for name, lim in kept:
            pipe.zcard(q.keys.limit_held(name))
            pipe.zcount(q.keys.limit_starts(name), f"({now - lim.per_ms}", "+inf")
        counts = pipe.execute()
    return [LimitUse(lim, int(counts[2 * i]), int(counts[2 * i + 1]))
            for i, (_, lim) in enumerate(kept)]


def limit_starts(q: QueueBase, name: str) -> dict[str, int]:
    """The leases a rate limit's window holds now, each with its start (Redis time, ms): what
    the next dequeue counts against the limit's rate."""
    with translated("limit starts"):
        pairs = q.redis.zrange(q.keys.limit_starts(name), 0, -1, withscores=True)
    return {str(member): int(score) for member, score in pairs}

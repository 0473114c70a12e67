"""How far a consumer group of a queue's `events` stream (the mirror's, by default) is behind
the engine: the age of the oldest event it has not acknowledged. Read by the alerts' mirror-lag
condition (issue 36)."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from ..base import QueueBase, translated
from .common import redis_of


@dataclass(frozen=True)
class StreamLag:
    group_exists: bool  # False: no mirror has ever read this queue's events
    behind: int  # events not yet acknowledged (pending + not delivered; Redis 7's `lag`)
    oldest_ms: int | None  # the stream time of the oldest of them; None when caught up
    now_ms: int

    @property
    def seconds(self) -> float:
        """The lag in seconds: 0 when caught up."""
        return 0.0 if self.oldest_ms is None else max(0, self.now_ms - self.oldest_ms) / 1000


def events_lag(q: QueueBase, group: str = "mirror") -> StreamLag:
    """The group's lag on the queue's `events` stream (three round trips at most)."""
    key = q.keys.events
    now = q.now_ms()
    with translated("stream lag"):
        r = redis_of(q)
        try:
            groups = r.xinfo_groups(key)
        except redis.ResponseError:  # no such stream yet: nothing to be behind on
            return StreamLag(False, 0, None, now)
        g = next((g for g in groups if g.get("name") == group), None)
        if g is None:
            first = r.xrange(key, "-", "+", count=1)
            return StreamLag(False, int(r.xlen(key)),
                             _ms(first[0][0]) if first else None, now)
        pending = r.xpending(key, group)
        if pending and pending.get("pending"):
            oldest: str | None = str(pending["min"])
        else:
            after = r.xrange(key, f"({g['last-delivered-id']}", "+", count=1)
            oldest = after[0][0] if after else None
    behind = int(g.get("pending") or 0) + int(g.get("lag") or 0)
    return StreamLag(True, behind, _ms(oldest) if oldest else None, now)


def _ms(entry_id: str) -> int:
    return int(str(entry_id).split("-", 1)[0])

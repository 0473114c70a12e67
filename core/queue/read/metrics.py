"""Per-handler metrics as the engine keeps them in Redis, minute by minute (metrics.py)."""

from __future__ import annotations

from .. import metrics as _metrics
from ..base import QueueBase, int_in, translated
from ..errors import InvalidInput
from .common import redis_of

MAX_METRIC_MINUTES = _metrics.KEEP_MS // _metrics.MINUTE_MS + 1  # more are never kept


def handler_metrics(
    q: QueueBase, first: int, last: int | None = None
) -> dict[int, dict[str, _metrics.HandlerCounts]]:
    """Per-handler counts of the minutes `first`..`last` (minutes since the epoch, both
    included; `last` default: the current minute), as minute -> handler -> counts, minutes
    without any left out. One pipelined HGETALL per minute (their keys are named by the
    minute: no scan); at most a day's minutes, which is all Redis keeps."""
    if last is None:
        last = _metrics.minute_of(q.now_ms())
    int_in(first, "first minute", 0)
    int_in(last, "last minute", first)
    if last - first >= MAX_METRIC_MINUTES:
        raise InvalidInput(f"at most {MAX_METRIC_MINUTES} minutes at once")
    minutes = range(first, last + 1)
    with translated("handler metrics"):
        pipe = redis_of(q).pipeline(transaction=False)
        for m in minutes:
            pipe.hgetall(q.keys.metrics(m))
        replies = pipe.execute()
    return {m: _metrics.parse(h) for m, h in zip(minutes, replies, strict=True) if h}


def current_minute(q: QueueBase) -> int:
    """The minute the engine counts in now (the Redis server's clock, or the injected one)."""
    return _metrics.minute_of(q.now_ms())

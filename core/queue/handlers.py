"""Which handlers a queue's workers run: each worker announces its handler names per queue
when it starts, so producers can tell a typo (or a handler nobody deployed) from a real one.

One hash per queue (QueueKeys.handlers): handler name -> "<ms>/<worker>", the last worker
that announced it. Names stay until the queue's keys are removed: a handler once offered is
known, even while its workers are restarting.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .base import QueueBase, translated
from .keys import validate_id
from .models import HandlerOffer


def announce(queue: QueueBase, worker: str, names: Iterable[str]) -> None:
    """Record that `worker` runs the handlers `names` for `queue` (one round trip, two on the
    Redis server's clock)."""
    validate_id(worker, "worker name")
    offered = [validate_id(n, "handler name") for n in names]
    if not offered:
        return
    value = f"{queue.now_ms()}/{worker}"
    with translated("announce handlers"):
        queue.redis.hset(queue.keys.handlers, mapping=dict.fromkeys(offered, value))


def known(queue: QueueBase) -> dict[str, HandlerOffer]:
    """Every handler announced for `queue`, by name (sorted)."""
    with translated("known handlers"):
        raw: dict[str, str] = queue.redis.hgetall(queue.keys.handlers)
    return {name: _offer(name, raw[name]) for name in sorted(raw)}


def names(queue: QueueBase) -> set[str]:
    """The names alone: what a producer checks a submit against."""
    with translated("known handlers"):
        got: Any = queue.redis.hkeys(queue.keys.handlers)
    return set(got)


def _offer(name: str, value: str) -> HandlerOffer:
    ms, _, worker = value.partition("/")
    return HandlerOffer(name, int(ms) if ms.isdecimal() else 0, worker)

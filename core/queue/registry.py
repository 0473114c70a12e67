"""The registry of queue names: how the console, `queuestat` and the mirror find every queue
without KEYS or SCAN.

One zset per key prefix (keys.registry_key, `<prefix>:queues`): queue name -> when it was last
seen (ms). A producer adds its queue once per process (the first submit); workers refresh
theirs on every heartbeat. Names stay until someone removes them (`forget`).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

from .base import QueueBase, translated
from .errors import QueueError
from .keys import registry_key, validate_id

# Per client: the queue registry keys ("<prefix>:queues" + name) this process has written.
_SEEN: weakref.WeakKeyDictionary[Any, set[tuple[str, str]]] = weakref.WeakKeyDictionary()
_SEEN_LOCK = threading.Lock()
_generation = 0  # bumped by forget(): Queue objects then check the process-wide record again


def _now_ms() -> int:
    # The local clock: "last seen" is informative only, and asking Redis would cost a trip.
    return int(time.time() * 1000)


def touch(queues: Iterable[QueueBase]) -> None:
    """Record that `queues` are in use now: one ZADD per registry key (normally one)."""
    by_key: dict[tuple[Any, str], dict[str, int]] = {}
    now = _now_ms()
    for q in queues:
        by_key.setdefault((q.redis, q.keys.registry), {})[q.name] = now
    for (client, key), names in by_key.items():
        with translated("register queue"):
            client.zadd(key, names)
        with _SEEN_LOCK:
            _SEEN.setdefault(client, set()).update((key, n) for n in names)


def seen(queue: QueueBase) -> None:
    """Register `queue` once per process (what a producer calls on every submit: after the
    first, no round trip, and after the first per Queue object not even a lock). A Redis error
    here is not the caller's: the next call retries."""
    q: Any = queue
    if getattr(q, "_registered", None) == _generation:
        return
    mark = (queue.keys.registry, queue.name)
    with _SEEN_LOCK:
        known = mark in _SEEN.get(queue.redis, ())
    if not known:
        try:
            touch([queue])
        except QueueError:
            return
    q._registered = _generation


def names(client: Any, *, prefix: str = "qa") -> list[str]:
    """Every registered queue name under `prefix`, sorted."""
    return sorted(last_seen(client, prefix=prefix))


def last_seen(client: Any, *, prefix: str = "qa") -> dict[str, int]:
    """Every registered queue name under `prefix` -> when a producer or worker last used it
    (ms; producers only mark the first submit of each process)."""
    with translated("queue registry"):
        rows = client.zrange(registry_key(prefix), 0, -1, withscores=True)
    return {name: int(score) for name, score in rows}


def forget(client: Any, name: str, *, prefix: str = "qa") -> bool:
    """Remove a queue name from the registry (its keys are untouched); True if it was there."""
    validate_id(name, "queue name")
    with translated("queue registry"):
        removed = int(client.zrem(registry_key(prefix), name))
    global _generation
    with _SEEN_LOCK:
        for marks in _SEEN.values():
            marks.discard((registry_key(prefix), name))
        _generation += 1
    return removed == 1

"""The registry of queue names: how the console, `queuestat` and the mirror find every queue
without KEYS or SCAN.

One zset per key prefix (keys.registry_key, `<prefix>:queues`): queue name -> when it was last
seen (ms). A producer adds its queue once per process (the first submit); workers refresh
theirs on every heartbeat. Names stay until someone removes them (`forget`).

A member that is not a valid queue name (written by hand, or by another program sharing the
prefix) is skipped by every reader with one log line per process and name: one bad member must
not make the console answer 500, nor stop the scheduler or the mirror.
"""

from __future__ import annotations

import logging
import shlex
import threading
import time
import weakref
from collections.abc import Iterable
from typing import Any

from .base import QueueBase, translated
from .errors import InvalidInput, QueueError
from .keys import registry_key, validate_id

log = logging.getLogger(__name__)

# Per client: the queue registry keys ("<prefix>:queues" + name) this process has written.
_SEEN: weakref.WeakKeyDictionary[Any, set[tuple[str, str]]] = weakref.WeakKeyDictionary()
_SEEN_LOCK = threading.Lock()
_generation = 0  # bumped by forget(): Queue objects then check the process-wide record again
_SKIPPED: set[tuple[str, str]] = set()  # (registry key, invalid name) already logged
_SKIPPED_LOCK = threading.Lock()


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
    key = registry_key(prefix)
    with translated("queue registry"):
        rows = client.zrange(key, 0, -1, withscores=True)
    found: dict[str, int] = {}
    for name, score in rows:
        if isinstance(name, bytes):  # a client without decode_responses
            name = name.decode("utf-8", "replace")
        try:
            validate_id(name, "queue name")
        except InvalidInput as exc:
            _skip(key, name, exc)
            continue
        found[name] = int(score)
    return found


def _skip(key: str, name: str, exc: InvalidInput) -> None:
    with _SKIPPED_LOCK:
        if (key, name) in _SKIPPED:
            return
        _SKIPPED.add((key, name))
    log.warning("queue registry %s: skipping %s (remove it: redis-cli ZREM %s %s)",
                key, exc, key, shlex.quote(name))


def forget(client: Any, name: str, *, prefix: str = "qa") -> bool:
    """Remove a queue name from the registry (its keys are untouched); True if it was there.
    An invalid name is removed too: it names no keys, and readers only skip it."""
    if not isinstance(name, str):
        raise InvalidInput(f"invalid queue name {name!r}: not a string")
    with translated("queue registry"):
        removed = int(client.zrem(registry_key(prefix), name))
    global _generation
    with _SEEN_LOCK:
        for marks in _SEEN.values():
            marks.discard((registry_key(prefix), name))
        _generation += 1
    return removed == 1

"""The Django side's way to the engine: queues built from settings at call time.

Settings are read when a queue is asked for, never at import, so tests (and anything else)
can change REDIS_URL / QUEUE_PREFIX and the next call follows.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, cast

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core.queue import InvalidInput, Queue, RedisUnavailable
from core.queue.connect import Client, connect, redacted, seeds

if TYPE_CHECKING:
    import redis

__all__ = ["DEFAULT_QUEUE", "get_queue", "redacted", "redis_client"]

DEFAULT_QUEUE = "default"
CONNECT_TIMEOUT_S = 5.0

_clients: dict[str, Client] = {}
_lock = threading.Lock()


def redis_client(url: str | None = None) -> Client:
    """One shared client (connection pools) per Redis URL, settings.REDIS_URL by default: a
    cluster client when the URL names a node, or several seed nodes, of a Redis Cluster."""
    url = url or settings.REDIS_URL
    with _lock:
        client = _clients.get(url)
    if client is not None:
        return client
    try:
        client = connect(url, socket_connect_timeout=CONNECT_TIMEOUT_S)
    except InvalidInput as exc:
        raise ImproperlyConfigured(f"REDIS_URL {exc}") from exc
    except RedisUnavailable:
        # Not kept, so whether it is a cluster is asked again next time. Meanwhile a client
        # of the first node makes the caller's first command fail as RedisUnavailable, where
        # the caller handles it (the console's 503 page, the commands' message).
        return connect(seeds(url)[0], cluster=False, socket_connect_timeout=CONNECT_TIMEOUT_S)
    with _lock:
        kept = _clients.setdefault(url, client)  # another thread may have connected first
    if kept is not client:
        client.close()
    return kept


def get_queue(name: str | None = None) -> Queue:
    """The queue `name` ("default" if None) on settings.REDIS_URL under settings.QUEUE_PREFIX."""
    # The cast until QueueBase's annotation names RedisCluster, which it already accepts.
    client = cast("redis.Redis", redis_client())
    return Queue(client, name or DEFAULT_QUEUE, prefix=settings.QUEUE_PREFIX,
                 max_result_bytes=settings.QUEUE_MAX_RESULT_BYTES,
                 metrics=getattr(settings, "HANDLER_METRICS", True))

"""The Django side's way to the engine: queues built from settings at call time.

Settings are read when a queue is asked for, never at import, so tests (and anything else)
can change REDIS_URL / QUEUE_PREFIX and the next call follows.
"""

from __future__ import annotations

import threading
from urllib.parse import urlsplit, urlunsplit

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from core.queue import Queue

DEFAULT_QUEUE = "default"
CONNECT_TIMEOUT_S = 5.0

_clients: dict[str, redis.Redis] = {}
_lock = threading.Lock()


def redis_client(url: str | None = None) -> redis.Redis:
    """One shared client (a connection pool) per Redis URL; settings.REDIS_URL by default."""
    url = url or settings.REDIS_URL
    with _lock:
        client = _clients.get(url)
        if client is None:
            try:
                client = redis.Redis.from_url(
                    url, decode_responses=True, socket_connect_timeout=CONNECT_TIMEOUT_S
                )
            except ValueError as exc:
                raise ImproperlyConfigured(
                    f"REDIS_URL {redacted(url)!r} is not a Redis URL ({exc}); "
                    "expected redis://host:port/db, rediss://... or unix://..."
                ) from exc
            _clients[url] = client
    return client


def get_queue(name: str | None = None) -> Queue:
    """The queue `name` ("default" if None) on settings.REDIS_URL under settings.QUEUE_PREFIX."""
    return Queue(redis_client(), name or DEFAULT_QUEUE, prefix=settings.QUEUE_PREFIX)


def redacted(url: str) -> str:
    """`url` with any password replaced by ***, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))

"""Which queues the console lists, and the queue a page asks for.

Queue names come from the engine's registry (`read.queues`: one sorted set that
producers and workers keep current, never KEYS/SCAN), and the default queue is always there.
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest

from core.conf import DEFAULT_QUEUE, get_queue, redis_client
from core.queue import Queue, read

from .aggregates import cached


def queue_names() -> list[str]:
    """Every queue the console shows, sorted, the default queue first (cached like the
    aggregates)."""
    prefix = settings.QUEUE_PREFIX
    names = cached(f"queues|{prefix}", lambda: read.queues(redis_client(), prefix=prefix))
    return [DEFAULT_QUEUE, *(n for n in names if n != DEFAULT_QUEUE)]


def queue_from(request: HttpRequest, name: str | None = None) -> Queue:
    """The queue named in the URL (or ?queue=, the default queue if absent); 404 if no
    producer or worker has used it."""
    name = name if name is not None else request.GET.get("queue") or DEFAULT_QUEUE
    if name not in queue_names():
        raise Http404(f"There is no queue named {name!r}.")
    return get_queue(name)

"""Which queues the console lists, and the queue a page asks for.

Queue names come from one function, `queue_names()`, so that the console lists every queue
without KEYS/SCAN: until the engine keeps a registry of queue names, the configured
CONSOLE_QUEUES (the default queue if unset).
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest

from core.conf import DEFAULT_QUEUE, get_queue
from core.queue import Queue


def queue_names() -> list[str]:
    """Every queue the console shows, sorted, the default queue first."""
    names = set(getattr(settings, "CONSOLE_QUEUES", None) or [DEFAULT_QUEUE])
    return sorted(names, key=lambda n: (n != DEFAULT_QUEUE, n))


def queue_from(request: HttpRequest, name: str | None = None) -> Queue:
    """The queue named in the URL (or ?queue=, the default queue if absent); 404 if the
    console does not know it."""
    name = name if name is not None else request.GET.get("queue") or DEFAULT_QUEUE
    if name not in queue_names():
        raise Http404(f"There is no queue named {name!r}.")
    return get_queue(name)

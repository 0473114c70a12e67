"""Placeholder overview: the default queue's depths from the engine's stats.

To be replaced by the real overview page.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.conf import get_queue, redacted
from core.queue import RedisUnavailable, introspect


@login_required
def home(request: HttpRequest) -> HttpResponse:
    queue = get_queue()
    try:
        stats = introspect.stats(queue)
    except RedisUnavailable:
        context = {"queue": queue.name, "unreachable": redacted(settings.REDIS_URL)}
        return render(request, "core/home.html", context, status=503)
    return render(request, "core/home.html", {"queue": queue.name, "stats": stats})

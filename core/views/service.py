"""Endpoints for machines and the way in: /healthz (public), /metrics (bearer token), login."""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError, connection
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from core.conf import redis_client
from core.console.metrics import HandlerCollector, QueueCollector
from core.queue import QueueError, read


@login_not_required
@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Whether Redis and the database answer: 200, or 503 naming what does not."""
    checks = {"redis": "ok", "database": "ok"}
    try:
        read.ping(redis_client())
    except QueueError as exc:
        checks["redis"] = f"error: {type(exc).__name__}"
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    healthy = all(v == "ok" for v in checks.values())
    return JsonResponse({"healthy": healthy, **checks}, status=200 if healthy else 503)


@login_not_required
@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format, for `Authorization: Bearer <METRICS_TOKEN>` only; without a
    METRICS_TOKEN setting there is no such page."""
    token = getattr(settings, "METRICS_TOKEN", "")
    if not token:
        raise Http404("/metrics is off: set METRICS_TOKEN to turn it on.")
    given = request.headers.get("Authorization", "")
    if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
        response = HttpResponse("a bearer token is required\n", status=403,
                                content_type="text/plain")
        response["WWW-Authenticate"] = "Bearer"
        return response
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector())
    registry.register(HandlerCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

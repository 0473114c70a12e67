"""Dead letters, from the database mirror of the `dead` stream: grouped by error fingerprint
(handler + exception class + masked message), then the letters of one group, newest first.

The group list is one GROUP BY on the (queue, fingerprint, dead_at) index of the letters
still dead; a group's letters are a keyset page on the same index."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Max, Min, QuerySet
from django.http import Http404, HttpRequest, HttpResponse

from core.console import params
from core.console.paging import Paged, db_cursor, keyset
from core.console.queues import queue_from
from core.models import DeadLetter

from .common import console_page, page

MAX_GROUPS = 200


def _filtered(request: HttpRequest, queue: str) -> tuple[QuerySet[DeadLetter], dict[str, Any]]:
    q = request.GET
    handler, tenant = params.text(q, "handler"), params.text(q, "tenant")
    rid = params.text(q, "request", 128)
    since, until = params.when(q, "since"), params.when(q, "until")
    qs = DeadLetter.still_dead(queue, handler=handler, tenant=tenant, request_id=rid,
                               since=since, until=until)
    filters = {"handler": handler or "", "tenant": tenant or "", "request": rid or "",
               "since": q.get("since", ""), "until": q.get("until", "")}
    return qs, filters


@console_page
def groups(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    qs, filters = _filtered(request, queue.name)
    rows = list(
        qs.values("fingerprint")
        .annotate(count=Count("id"), first=Min("dead_at"), last=Max("dead_at"),
                  handler=Max("handler"), exception=Max("exception"), pattern=Max("pattern"),
                  example=Max("error"), requests=Count("request_id", distinct=True),
                  tenants=Count("tenant", distinct=True))
        .order_by("-last")[: MAX_GROUPS + 1]
    )
    context = {"groups": rows[:MAX_GROUPS], "more_groups": len(rows) > MAX_GROUPS,
               "filters": filters, "letters_total": sum(g["count"] for g in rows[:MAX_GROUPS])}
    return page(request, "core/dead_groups.html", queue, context, nav="dead")


@console_page
def group(request: HttpRequest, queue_name: str, fingerprint: str) -> HttpResponse:
    queue = queue_from(request, queue_name)
    if not (0 < len(fingerprint) <= 40 and fingerprint.isalnum()):
        raise Http404(f"{fingerprint!r} is not an error fingerprint.")
    qs, filters = _filtered(request, queue.name)
    qs = qs.filter(fingerprint=fingerprint)
    paged: Paged[DeadLetter] = keyset(qs, "dead_at", db_cursor(request))
    head = DeadLetter.objects.filter(queue=queue.name, fingerprint=fingerprint).order_by(
        "-dead_at").first()
    if head is None:
        raise Http404(f"Queue {queue.name} has no dead letters with fingerprint {fingerprint}.")
    summary = qs.aggregate(count=Count("id"), first=Min("dead_at"), last=Max("dead_at"),
                           requests=Count("request_id", distinct=True),
                           tenants=Count("tenant", distinct=True))
    context = {"letters": paged.items, "paged": paged, "head": head, "group": summary,
               "fingerprint": fingerprint, "filters": filters}
    return page(request, "core/dead_group.html", queue, context, nav="dead")

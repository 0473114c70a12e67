"""Retention (issue 35): how long the database keeps each kind of history, for every queue and
for the queue shown, where each value comes from, and the pruner's last passes. Admins set or
take back a value here (core.ops.retention: core.change_retentionsetting, one audit entry; a
refusal is audited too); every console account may read it."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.console.queues import queue_from
from core.ops import retention as ops
from core.ops.audit import as_actor
from core.ops.errors import BadInput, Refused
from core.queue import Queue

from .common import PERMISSION, console_page, page

SCOPES = ("queue", "every")


def _context(queue: Queue, **extra: Any) -> dict[str, Any]:
    rows, runs = ops.table()
    return {
        "rows": [(r, r.queues.get(queue.name)) for r in rows], "runs": runs,
        "last": runs[0] if runs else None, "form": {}, **extra,
    }


@console_page
def retention_page(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    try:
        context = _context(queue)
    except BadInput as exc:  # a QA_RETAIN_ setting that is not a duration
        context = {"rows": [], "runs": [], "last": None, "form": {}, "settings_error": str(exc)}
    return page(request, "core/retention.html", queue, context, nav="retention", live=False)


@require_POST
def retention_change(request: HttpRequest) -> HttpResponse:
    """Set (a duration) or take back (`unset`) one kind's retention, for the queue shown or
    for every queue."""
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    queue = queue_from(request, request.POST.get("queue") or None)
    form = {f: request.POST.get(f, "").strip()[:200] for f in ("kind", "duration", "scope")}
    action = request.POST.get("action", "set")
    scope = form["scope"] if form["scope"] in SCOPES else "queue"
    actor = as_actor(request.user)
    try:
        if action == "unset":
            result = ops.unset_retention(actor, form["kind"],
                                         queue=queue.name if scope == "queue" else None)
        else:
            result = ops.set_retention(actor, form["kind"], form["duration"],
                                       queue=queue.name if scope == "queue" else None)
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    except BadInput as exc:
        context = _context(queue, error=str(exc), form=form | {"scope": scope})
        return page(request, "core/retention.html", queue, context, nav="retention",
                    status=400, live=False)
    (messages.success if result.acted else messages.info)(request, result.message[:1].upper()
                                                          + result.message[1:] + ".")
    for note in result.notes:
        messages.warning(request, note[:1].upper() + note[1:] + ".")
    return HttpResponseRedirect(f"{reverse('core:retention')}?queue={queue.name}")

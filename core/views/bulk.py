"""Bulk actions on everything matching a list page's filter: preview, confirm, progress, stop.

1. The list page's "… all matching" button POSTs its filter to /actions/preview/; the service
   layer takes the snapshot of target ids then (core.ops.bulk.preview) and the browser goes
   to /actions/bulk/<id>/: the exact count, a sample, the filter in words.
2. Confirm (POST, with the count typed above 1,000 and, for a requeue, an optional rate
   limit) starts it on that snapshot; `runactions` works through it in chunks.
3. The same page then shows its progress, polled by htmx every second, with a Stop button,
   and finally its result; polling stops (286) once it has finished.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

from django.contrib import messages
from django.core.exceptions import ObjectDoesNotExist
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.console import forms
from core.console.errors import error_page
from core.console.params import BadParam
from core.console.queues import queue_from
from core.models import DeadLetter
from core.ops import bulk
from core.ops.errors import BadInput, Refused
from core.ops.perms import allowed

from .actions import refused
from .common import console_page, page

BULK_ACTIONS = ("requeue", "delete", "cancel")
FINISHED = ("stopped", "done", "failed")
PROGRESS_POLL_S = 1


def _get(bulk_id: int) -> Any:
    try:
        return bulk.get(bulk_id)
    except (BadInput, ObjectDoesNotExist):  # the model's DoesNotExist is one
        raise Http404(f"There is no bulk action {bulk_id}.") from None


@require_POST
def preview(request: HttpRequest) -> HttpResponse:
    # A group's own button says "<action>:<fingerprint>"; the others name the action alone.
    action, _, fingerprint = request.POST.get("preview", "").partition(":")
    action = action or request.POST.get("action", "")
    try:
        if action not in BULK_ACTIONS:
            raise BadParam(f"action must be one of {', '.join(BULK_ACTIONS)}, not {action!r}.")
        queue = queue_from(request, request.POST.get("queue") or None)
        filters = forms.filters(request.POST, action)
        if fingerprint:
            filters["fingerprint"] = fingerprint
        made = bulk.preview(request.user, action, queue.name, filters)
    except (BadInput, BadParam) as exc:
        if not any(allowed(request.user).get(a) for a in BULK_ACTIONS):
            return refused(request, PermissionError(""))  # junk, from an account that may not
        return error_page(request, 400, "Bad request", str(exc))
    except Refused as exc:
        return refused(request, exc)
    return HttpResponseRedirect(reverse("core:bulk", args=[made.id]))


@console_page
def show(request: HttpRequest, bulk_id: int) -> HttpResponse:
    return _render(request, _get(bulk_id))


def _render(request: HttpRequest, b: Any, *, error: str = "", status: int = 200) -> HttpResponse:
    queue = queue_from(request, b.queue)
    fingerprint = (b.filters or {}).get("fingerprint") if isinstance(b.filters, dict) else None
    group = DeadLetter.objects.filter(queue=b.queue, fingerprint=fingerprint).order_by(
        "-dead_at").first() if fingerprint else None  # the hash says nothing: show the error
    context = {
        "bulk": b, "error": error, "group": group, "finished": b.status in FINISHED,
        "is_preview": b.status == "previewed", "rate_allowed": b.action == "requeue",
        "poll_s": PROGRESS_POLL_S,
        "sample_columns": list(b.sample[0].keys()) if b.sample else [],
        "sample_rows": [_sample_row(r) for r in b.sample],
        "typed": request.POST.get("typed_count", "") if request.method == "POST" else "",
        "rate": request.POST.get("rate", "") if request.method == "POST" else "",
    }
    nav = "requests" if b.action == "cancel" else "dead"
    return page(request, "core/bulk.html", queue, context, nav=nav, status=status,
                live=b.status in ("running", "stopping"))


def _sample_row(row: dict[str, Any]) -> list[tuple[str, Any]]:
    """A sample row's cells: its times (ISO text, "…_at") as datetimes, shown as "3 min ago"."""
    cells = []
    for key, value in row.items():
        if key.endswith("_at") and isinstance(value, str):
            with contextlib.suppress(ValueError):  # not a time after all: shown as it is
                value = dt.datetime.fromisoformat(value)
        cells.append((key, value))
    return cells


@require_POST
def confirm(request: HttpRequest, bulk_id: int) -> HttpResponse:
    b = _get(bulk_id)
    typed = request.POST.get("typed_count", "").strip() or None
    try:
        rate = forms.rate(request.POST) if b.action == "requeue" else None
        started = bulk.confirm(request.user, bulk_id, typed_count=typed, rate_per_s=rate)
    except (BadInput, BadParam) as exc:
        if not allowed(request.user).get(b.action):
            return refused(request, PermissionError(""))
        return _render(request, b, error=str(exc), status=400)
    except Refused as exc:
        return refused(request, exc)
    if getattr(started, "already_confirmed", False):
        messages.info(request, "Already confirmed: this action was started once and is not "
                      "started again. Its progress is below.")
    return HttpResponseRedirect(reverse("core:bulk", args=[bulk_id]))


@require_POST
def stop(request: HttpRequest, bulk_id: int) -> HttpResponse:
    b = _get(bulk_id)
    try:
        stopped = bulk.stop(request.user, bulk_id)
    except BadInput as exc:
        return error_page(request, 400, "Bad request", str(exc))
    except Refused as exc:
        return refused(request, exc)
    if b.status in FINISHED:
        messages.info(request, f"Already {b.status}: nothing to stop.")
    elif b.status == "previewed":  # never confirmed: nothing ran, and nothing will
        messages.info(request, "Dropped: this preview was never confirmed, so nothing was "
                               "done; it cannot be confirmed now.")
    elif stopped.status in ("stopping", "stopped"):
        messages.warning(request, "Stopping: the chunk under way finishes, nothing after it "
                         "starts. The count below is what was done.")
    return HttpResponseRedirect(reverse("core:bulk", args=[bulk_id]))

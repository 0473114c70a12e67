"""Limits (issue 37): the queue's limits on keys, each with its use against its cap (tasks
leased now against its concurrency, starts in its current window against its rate), live.
Admins add, change and remove them here (core.ops.limits: core.pause_queue, one audit entry; a
refusal is audited too); every console account reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.console.queues import queue_from
from core.ops import limits as ops
from core.ops.audit import as_actor
from core.ops.errors import BadInput, Refused
from core.queue import Queue
from core.queue.limits import KINDS
from core.queue.models import LimitUse

from .common import PERMISSION, console_page, page

FIELDS = ("name", "on", "value", "rate", "concurrency")


@dataclass(frozen=True)
class Row:
    """A limit as the page shows it: its use against each cap, in percent of the cap."""

    use: LimitUse
    on: str  # "handler=report", "queue"
    rate: str  # "100/1s", "" without a rate
    period: str  # the rate's window: "1s"
    held_pct: int
    started_pct: int


def _pct(used: int, cap: int | None) -> int:
    return min(100, round(100 * used / cap)) if cap else 0


def _row(u: LimitUse) -> Row:
    lim = u.limit
    return Row(u, lim.on if lim.on == "queue" else f"{lim.on}={lim.value}",
               f"{lim.rate}/{ops.period_text(lim.per_ms)}" if lim.rate is not None else "",
               ops.period_text(lim.per_ms),
               _pct(u.held, lim.concurrency), _pct(u.started, lim.rate))


def _context(queue: Queue, **extra: Any) -> dict[str, Any]:
    (shown,) = ops.table(queue.name)
    return {"rows": [_row(u) for u in shown.limits], "kinds": KINDS, "form": {},
            **extra}


@console_page
def limits_page(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    return page(request, "core/limits.html", queue, _context(queue), nav="limits")


@require_POST
def limits_change(request: HttpRequest) -> HttpResponse:
    """Add or change (`action=set`) or remove (`action=remove`) one limit of the queue shown."""
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    queue = queue_from(request, request.POST.get("queue") or None)
    form = {f: request.POST.get(f, "").strip()[:200] for f in FIELDS}
    action = request.POST.get("action", "set")
    actor = as_actor(request.user)
    try:
        if action == "remove":
            result = ops.remove_limit(actor, form["name"], queue=queue.name)
        else:
            on = form["on"] if form["on"] == "queue" else f"{form['on']}={form['value']}"
            result = ops.set_limit(actor, form["name"], on, rate=form["rate"] or None,
                                   concurrency=form["concurrency"] or None, queue=queue.name)
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    except BadInput as exc:
        context = _context(queue, error=str(exc), form=form | {"action": action})
        return page(request, "core/limits.html", queue, context, nav="limits", status=400,
                    live=False)
    (messages.success if result.acted else messages.info)(
        request, result.message[:1].upper() + result.message[1:] + ".")
    return HttpResponseRedirect(f"{reverse('core:limits')}?queue={queue.name}")

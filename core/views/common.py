"""What every console page shares: the permission, the layout's context, full page or the
polled fragment."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from functools import wraps
from typing import Any, ParamSpec

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template import TemplateDoesNotExist
from django.template.loader import get_template, render_to_string
from django.views.decorators.http import require_safe

from core.console.aggregates import summary
from core.console.params import BadParam
from core.console.queues import queue_names
from core.ops.perms import allowed
from core.queue import Queue

P = ParamSpec("P")
PERMISSION = "core.view_console"
LIVE_TARGET = "live"  # id of the element a page's polling replaces


def console_page(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A page of the console: GET or HEAD only (GET never changes state), needs
    core.view_console (LoginRequiredMiddleware has already sent anonymous visitors to log in)."""

    @require_safe
    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.has_perm(PERMISSION):
            raise PermissionDenied
        return view(request, *args, **kwargs)

    return wrapped


def polled(request: HttpRequest) -> bool:
    """Is this htmx's poll of the page's live fragment (else: the whole page)?"""
    htmx: Any = getattr(request, "htmx", None)
    return bool(htmx) and htmx.target == LIVE_TARGET


def page(
    request: HttpRequest, template: str, queue: Queue, context: dict[str, Any], *,
    nav: str, status: int = 200, live: bool = True,
) -> HttpResponse:
    """The whole page, or its `live` partial for a poll. `live=False` renders the fragment
    without its polling trigger and answers 286, so htmx stops polling (a finished request)."""
    ctx = {
        "can": allowed(request.user),  # which action buttons this user sees
        "nonce": nonce(),  # one per rendering of the action forms: a resubmission is seen
        "queue": queue.name,
        "queues": queue_names(),
        # A page that read the queue's counters with its own figures passes them (so that its
        # strip and its body say the same); the others show the cached ones.
        "summary": context["summary"] if "summary" in context else summary(queue),
        "nav": nav,
        "live": live,
        "poll_s": f"{settings.CONSOLE_POLL_S:g}",  # QA_CONSOLE_POLL_S
        "now_ms": int(time.time() * 1000),
        **context,
    }
    if polled(request):
        # The queue's strip under the navigation comes along out of band: outside the live
        # fragment, it would otherwise keep the figures of when the page was opened (a done
        # job's page showed "1 leased", its combine step running at the time).
        body = render_to_string(_live_part(template), ctx, request)
        if ctx["summary"]:
            body += render_to_string("core/_strip.html", {**ctx, "oob": True}, request)
        return HttpResponse(body, status=status if live else 286)
    return render(request, template, ctx, status=status)


def _live_part(template: str) -> str:
    """The page's live fragment; BadParam (400) for a page that has none (Tokens, Retention):
    it never polls, so only a forged or stale HX-Target asks for one."""
    part = f"{template}#live"
    try:
        get_template(part)
    except TemplateDoesNotExist:
        raise BadParam("This page has no live part to poll: load the whole page.") from None
    return part


def nonce() -> str:
    """A fresh nonce for one rendering of a page's action forms (see views.actions)."""
    return secrets.token_urlsafe(12)

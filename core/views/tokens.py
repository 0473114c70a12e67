"""The Tokens page (issue 38), under the user's account: the HTTP API's tokens this user may
see (their own; an admin's, everyone's), a form to create one (shown once, on the answer to
that POST, never again) and a revoke button on each (core.ops.tokens: permission, audit)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from core.console.queues import queue_from
from core.models.tokens import SCOPES
from core.ops import tokens
from core.ops.audit import as_actor
from core.ops.errors import BadInput, Refused

from .common import PERMISSION, console_page, page


def _context(request: HttpRequest, **extra: Any) -> dict[str, Any]:
    rows = tokens.listing(as_actor(request.user))
    return {"tokens": [(t, tokens.status(t)) for t in rows], "scopes": SCOPES,
            "manage_all": request.user.has_perm("core.delete_apitoken"),
            "form": {"scope": "read", "expires": tokens.DEFAULT_EXPIRY}, **extra}


@console_page
def token_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    return page(request, "core/tokens.html", queue, _context(request), nav="tokens",
                live=False)


@never_cache
@require_POST
def token_create(request: HttpRequest) -> HttpResponse:
    """Create a token and show its text on this answer only (not cached, not redirected)."""
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    queue = queue_from(request, request.POST.get("queue") or None)
    form = {f: request.POST.get(f, "").strip()[:200] for f in ("name", "scope", "expires",
                                                               "user")}
    owner: Any = form["user"] or request.user
    try:
        made = tokens.create(as_actor(request.user), form["name"], user=owner,
                             scope=form["scope"], expires=form["expires"] or None)
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    except BadInput as exc:
        return page(request, "core/tokens.html", queue,
                    _context(request, error=str(exc), form=form), nav="tokens", status=400,
                    live=False)
    return page(request, "core/tokens.html", queue, _context(request, created=made),
                nav="tokens", live=False)


@require_POST
def token_revoke(request: HttpRequest, name: str) -> HttpResponse:
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    queue = request.POST.get("queue") or ""
    try:
        got = tokens.revoke(as_actor(request.user), name)
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    except BadInput as exc:
        messages.error(request, str(exc))
    else:
        if got.done:
            messages.success(request, f"Token {got.token.name} revoked: every call with it is "
                                      "refused from now on.")
        else:  # another tab, or another admin, revoked it first
            messages.info(request, f"Nothing done: token {got.token.name} was revoked "
                                   "already.")
    url = reverse("core:tokens")
    return HttpResponseRedirect(f"{url}?queue={queue}" if queue else url)

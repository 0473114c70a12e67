"""The NinjaAPI of /api/v1/: token auth on every endpoint but the schema and its docs, and
every refusal as JSON `{"message": ...}` with its status, never a traceback."""

from __future__ import annotations

from typing import Any

from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver
from ninja import NinjaAPI, Swagger
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from core.console.params import BadParam
from core.ops import tokens
from core.ops.errors import BadInput, NotFound, OpsError, Refused, StaleState
from core.ops.perms import scope_allows, scope_for
from core.queue import InvalidInput, QueueError, RedisUnavailable, UnknownRequest

from . import bulk, datajobs, history, queues, requests, settings
from .common import refuse_nul


class TokenAuth(HttpBearer):
    """`Authorization: Bearer <token>`: the token's actor (core.ops.tokens.authenticate), or a
    401 that says why (none, not valid, expired, revoked) or a 429 past its rate."""

    def __call__(self, request: HttpRequest) -> Any:
        value = request.headers.get("Authorization", "")
        scheme, _, text = value.partition(" ")
        who = tokens.authenticate(text.strip() if scheme.lower() == "bearer" else None)
        refuse_nul(request)  # after the token: a caller without one learns nothing more
        return who

    def authenticate(self, request: HttpRequest, token: str) -> Any:  # pragma: no cover
        return tokens.authenticate(token)


class LocalSwagger(Swagger):
    """Swagger UI from our own static files (ninja's templates, found through the settings'
    template folders): ninja renders its CDN page instead unless "ninja" is an installed app,
    which it is not here, so that no command imports it at Django's setup (settings.py)."""

    def render_page(self, request: HttpRequest, api: NinjaAPI, **kwargs: Any) -> HttpResponse:
        import json

        from django.shortcuts import render
        from ninja.openapi.docs import _csrf_needed

        self.settings["url"] = self.get_openapi_url(api, kwargs)
        return render(request, self.template, {
            "swagger_settings": json.dumps(self.settings, indent=1), "api": api,
            "add_csrf": _csrf_needed(api)})


def build() -> NinjaAPI:
    api = NinjaAPI(
        title="queueadmin", version="1", urls_namespace="core:api",
        description="The queue's operations over HTTP with a token: docs/api.md.",
        auth=TokenAuth(), docs=LocalSwagger(), docs_url="/docs",
    )
    for router in (requests.router, queues.router, bulk.router, datajobs.router,
                   history.router, settings.router):
        api.add_router("", router)
    handlers: dict[type[Exception], tuple[int, str]] = {
        BadInput: (400, ""), InvalidInput: (400, ""), BadParam: (400, ""), StaleState: (409, ""),
        UnknownRequest: (404, ""), Http404: (404, ""), NotFound: (404, ""),
        RedisUnavailable: (503, "the queue's Redis cannot be reached now: try again shortly"),
        tokens.TokenRefused: (401, ""), AuthenticationError: (401, "no valid token"),
        OperationalError: (503, "the database cannot be reached now: try again shortly"),
        InterfaceError: (503, "the database cannot be reached now: try again shortly"),
    }
    for kind, (status, fixed) in handlers.items():
        api.add_exception_handler(kind, _answer(api, status, fixed))
    api.add_exception_handler(Refused, _refused(api))
    api.add_exception_handler(tokens.RateLimited, _limited(api))
    api.add_exception_handler(ValidationError, _invalid(api))
    api.add_exception_handler(HttpError, _http_error(api))
    api.add_exception_handler(OpsError, _answer(api, 400, ""))
    api.add_exception_handler(QueueError, _answer(api, 409, ""))
    return api


def _answer(api: NinjaAPI, status: int, fixed: str) -> Any:
    def handle(request: HttpRequest, exc: Exception) -> HttpResponse:
        return api.create_response(request, {"message": fixed or str(exc)}, status=status)

    return handle


def _refused(api: NinjaAPI) -> Any:
    def handle(request: HttpRequest, exc: Exception) -> HttpResponse:
        message = str(exc)
        who = getattr(request, "auth", None)
        scope = getattr(who, "scope", None)
        perm = message.partition("the permission ")[2].split(" ")[0]
        if scope and perm and not scope_allows(scope, perm):
            message += (f"; the token's scope is {scope}, and this needs at least "
                        f"{scope_for(perm)}")
        elif scope and perm:  # the scope allows it: the token's user lacks the permission
            message += (f"; the token's scope ({scope}) allows it, but its user does not "
                        "hold that permission")
        return api.create_response(request, {"message": message}, status=403)

    return handle


def _limited(api: NinjaAPI) -> Any:
    def handle(request: HttpRequest, exc: Exception) -> HttpResponse:
        response = api.create_response(request, {"message": str(exc)}, status=429)
        response["Retry-After"] = str(getattr(exc, "retry_after", 60))
        return response

    return handle


def _invalid(api: NinjaAPI) -> Any:
    def handle(request: HttpRequest, exc: Exception) -> HttpResponse:
        errors = getattr(exc, "errors", [])
        said = "; ".join(_one(e) for e in errors[:5]) or "the input is not valid"
        return api.create_response(
            request, {"message": f"invalid input: {said}",
                      "errors": [{k: e.get(k) for k in ("loc", "msg", "type")} for e in errors]},
            status=400)

    return handle


def _one(error: dict[str, Any]) -> str:
    loc = [str(p) for p in error.get("loc", ())]
    if loc[:2] == ["body", "body"]:  # ninja's loc of a field of the body: body.body.tasks
        loc = loc[1:]
    where = ".".join(loc)
    return f"{where}: {error.get('msg', '')}" if where else str(error.get("msg", ""))


def _http_error(api: NinjaAPI) -> Any:
    def handle(request: HttpRequest, exc: Exception) -> HttpResponse:
        status = getattr(exc, "status_code", 400)
        message = getattr(exc, "message", str(exc))
        if isinstance(exc.__cause__, ValueError):  # ninja's "Cannot parse request body"
            kind = request.content_type or "none"
            message = (f"the body is not valid JSON: {exc.__cause__}"[:300]
                       if kind == "application/json" else
                       f"send the body as JSON (Content-Type: application/json, not {kind})")
        return api.create_response(request, {"message": message},
                                   status=status if 400 <= status < 500 else 400)

    return handle


_built: list[NinjaAPI] = []


def urls() -> list[URLPattern | URLResolver]:
    """The API's URL patterns, each view open to the login middleware (the API takes only
    tokens: no session, no CSRF). Included under the namespace core:api (core/urls.py)."""
    if not _built:
        _built.append(build())
    api = _built[0]
    patterns = list(api.urls[0])
    for p in patterns:
        if isinstance(p, URLPattern):
            p.callback.login_required = False
    return patterns

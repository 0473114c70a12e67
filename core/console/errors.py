"""Error pages: 400 / 403 / 404 with the reason, and a 503 with a banner when Redis cannot be
reached or cannot serve anyone for a while (LOADING, BUSY...). Never a traceback; the next
request tries again, so the console recovers by itself.

Any other error reply (WRONGTYPE, an id Redis will not parse...) is Redis refusing one
command: Redis is up, so it is a 400 page with its reply, never the outage banner. Which
reply is which is the engine's to say (core.queue.replies)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from core.conf import DEFAULT_QUEUE, redacted
from core.queue import QueueadminError, RedisReplyError, RedisUnavailable, replies

log = logging.getLogger("queueadmin.console")


class ConsoleError(QueueadminError):
    """Root of what the console's own code raises (a user that cannot be made as asked...)."""


class ClientErrorLines(logging.Filter):
    """On `django.request`: a 4xx is logged as its one line, without the traceback Django
    attaches to a refused request (a bad query parameter, a permission): the message says what
    was wrong, and a traceback in the log reads as a bug to whoever is on call. A 5xx keeps its
    traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "status_code", 500) < 500:
            record.exc_info, record.exc_text = None, None
        return True


def error_page(request: HttpRequest, status: int, title: str, message: str) -> HttpResponse:
    template = "core/error.html#body" if request.headers.get("HX-Request") else "core/error.html"
    return render(request, template, {"status": status, "title": title, "message": message,
                                      "queue": DEFAULT_QUEUE}, status=status)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    return error_page(request, 400, "Bad request", str(exception) or "The request is invalid.")


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    """The refusal's own reason (the permission it needs, audited where the service refused
    it); else, to an account that may see the console, that it may not do this; else that it
    may not see the console (it was said to viewers refused an admin's page)."""
    said = str(exception).strip() if exception is not None else ""
    user = getattr(request, "user", None)
    if said:
        message = said + ("" if said.endswith(".") else ".")  # as said: it may start with a name
    elif user is not None and user.has_perm("core.view_console"):
        message = ("Your account may not do this: it needs a permission its groups do not "
                   "give. Ask an administrator (the operator and admin groups hold more).")
    else:
        message = ("Your account may not see the console. Ask an administrator to add you "
                   "to the viewer or operator group.")
    return error_page(request, 403, "Not allowed", message)


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    message = exception.args[0] if exception.args and isinstance(exception.args[0], str) \
        else "There is no such page."
    return error_page(request, 404, "Not found", message)


def server_error(request: HttpRequest) -> HttpResponse:
    return error_page(request, 500, "Server error", "Something went wrong; it has been logged.")


class RedisDownMiddleware:
    """Turns an unreachable or busy Redis into the 503 page with its banner, and a command
    Redis refused into a 400 page with its reply."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code == 405 and not response.content and \
                not request.path.startswith("/api/"):
            # require_POST's bare 405 is a blank browser error page: a form's address opened
            # again (Enter in the address bar, the history) after its submit.
            page = error_page(request, 405, "Not a page",
                              "This address takes a form's submit (it changes something), not "
                              "a visit: go back to the page the form is on and use its "
                              "button.")
            page["Allow"] = response.get("Allow", "POST")
            return page
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        # One not translated by the engine on the way here is the engine's all the same.
        exception = replies.engine_error(exception)
        if not isinstance(exception, RedisUnavailable | RedisReplyError):
            return None
        busy = isinstance(exception, RedisReplyError)
        if busy and not replies.passing(exception):
            log.warning("console: Redis refused a command for %s: %s", request.path, exception)
            return error_page(request, 400, "Redis refused the request",
                              f"Redis answered this page with an error: {exception}. Redis is "
                              "up; what the page asked for, or the data it read, is not what "
                              "Redis expected.")
        log.warning("console: Redis unavailable for %s: %s", request.path, exception)
        where = redacted(settings.REDIS_URL)
        message = (
            f"Redis at {where} answered with an error ({exception}); it may be loading its "
            "data or busy. This page retries by itself."
            if busy else
            f"Redis at {where} cannot be reached. Queue state is unknown until it answers "
            "again; this page retries by itself. Start the stack with make run, or check "
            "REDIS_URL."
        )
        template = "core/error.html#body" if request.headers.get("HX-Request") \
            else "core/error.html"
        return render(request, template, {"status": 503, "title": "Redis unavailable",
                                          "message": message, "redis_down": True,
                                          "queue": DEFAULT_QUEUE}, status=503)

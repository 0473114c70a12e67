"""Every answer under /api/ is JSON, also the ones Django makes before or around the API's
views: a path no endpoint has (404), a method an endpoint does not take (405), a body over
the size Django reads (413), a server error (500). Without this they were the console's HTML
pages, which a script cannot read."""

from __future__ import annotations

import json
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse

PREFIX = "/api/"
WHY = {404: "there is no such endpoint: {method} {path} (the endpoints: /api/v1/docs)",
       405: "{method} is not a method of {path}{allowed}",
       500: "the server failed on this call; it has been logged"}


def too_big() -> str:
    return (f"the body is over {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes, the most this "
            "server reads (DATA_UPLOAD_MAX_MEMORY_SIZE): send fewer tasks a call")


class JsonErrors:
    """Under /api/: a non-JSON error answer becomes `{"message": ...}` with its status."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (not request.path.startswith(PREFIX) or response.status_code < 400
                or response.get("Content-Type", "").startswith("application/json")):
            return response
        why = WHY.get(response.status_code)
        if why is None:
            return response
        allowed = response.get("Allow", "")
        message = why.format(method=request.method, path=request.path[:300],
                             allowed=f" (it takes {allowed})" if allowed else "")
        out = JsonResponse({"message": message}, status=response.status_code)
        if allowed:
            out["Allow"] = allowed
        return out

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if request.path.startswith(PREFIX) and isinstance(exception, RequestDataTooBig):
            return HttpResponse(json.dumps({"message": too_big()}), status=413,
                                content_type="application/json")
        return None

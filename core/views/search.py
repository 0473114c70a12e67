"""Search: the header's search box lands here. Requests by id, task id, tenant and handler
(looked up as typed), then those whose payloads or error messages hold every word, ranked or
newest first and paged by keyset; all from the database mirror, never a Redis scan."""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse

from core.console import params
from core.console import search as engine
from core.console.paging import raw_cursor
from core.console.queues import queue_from, queue_names

from .common import console_page, page

SCOPES = ("all", "queue")


@console_page
def search(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    q = request.GET
    text = params.text(q, "q", engine.MAX_LENGTH)
    scope = params.choice(q, "scope", SCOPES) or "all"
    after = raw_cursor(request)
    query = engine.parse(text, queue.name if scope == "queue" else None)
    started = time.perf_counter()
    direct = engine.direct(query, queue_names()) if after is None else engine.Direct()
    found = engine.text_matches(query, after)
    context = {
        "query": query, "direct": direct, "found": found, "hits": found.hits,
        "paged": found.paged, "scope": scope, "rank_max": engine.RANK_MAX,
        "search_q": query.text, "took_ms": round((time.perf_counter() - started) * 1000),
    }
    return page(request, "core/search.html", queue, context, nav="search", live=False)

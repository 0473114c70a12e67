"""The audit log: every operator action (console, Django admin, command line), newest first,
filtered by user, action and time, paged by entry id (keyset: a deep page costs what the
first does). Read-only: nothing here edits an entry."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from core.console import params
from core.console.paging import Paged, raw_cursor
from core.console.queues import queue_from
from core.ops import audit
from core.ops.perms import NEEDS

from .common import console_page, page

# Every action the log records: those a permission guards (core.ops.perms.NEEDS: the queue's,
# the schedules', the workers', retention's, alerts' and limits'), then the rest. A hand list
# of them missed run-now, the schedules', the tokens' and the alerts': they could not be
# filtered (test_the_filter_offers_every_action_the_code_records checks it).
ACTIONS = tuple(dict.fromkeys([
    *NEEDS, "stop", "preview", "submit", "datajob", "datajob-clean", "token-create",
    "token-revoke", "login", "unlock", "login-log-reset", "user-add", "user-change",
    "user-delete", "group-add", "group-change", "group-delete"]))
PAGE = 50


def _before(request: HttpRequest) -> int | None:
    raw = raw_cursor(request)
    if raw is None:
        return None
    if not raw.isdecimal() or len(raw) > 19:
        raise params.BadParam(f"Bad page cursor {raw!r}: expected an entry id. Start again "
                              "from the first page.")
    return int(raw)


@console_page
def audit_log(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    q = request.GET
    user = params.text(q, "user", 150)
    action = params.choice(q, "action", ACTIONS)
    since, until = params.when(q, "since"), params.when(q, "until")
    if since and until and since >= until:
        raise params.BadParam("since must be before until.")
    before = _before(request)
    rows: list[Any] = list(audit.entries(user=user, action=action, since=since, until=until,
                                         before_id=before, limit=PAGE + 1))
    more = len(rows) > PAGE
    rows = rows[:PAGE]
    paged = Paged(rows, str(rows[-1].id) if more and rows else None, before is None)
    context = {
        "entries": rows, "paged": paged, "actions": ACTIONS,
        "filters": {"user": user or "", "action": action or "", "since": q.get("since", ""),
                    "until": q.get("until", "")},
    }
    # Page one polls, so a new entry shows up; deeper pages hold still.
    return page(request, "core/audit.html", queue, context, nav="audit", live=before is None)

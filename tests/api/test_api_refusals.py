"""What a script author hit by trying the API with mistakes (2026-11-30): a misspelt field was
ignored (a bulk `filter` for `filters` previewed every request; `dryRun` cleaned for real),
an unknown target answered 200 "cancelled 0 of 1" or a 400, a bulk confirm's wrong count
started it, Django's own error pages under /api/ were HTML, eight `?wait=` calls took every
server thread. Each is refused now with a status and a JSON message that says why."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from core.api import requests as request_endpoints
from core.models import AuditEntry, BulkAction
from core.queue import Queue, handlers, read
from tests.api_support import API, Caller, token_for
from tests.console_support import World

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("body", "names"), [
    ({"handler": "echo", "tasks": [1], "delay": 3600}, "delay"),  # delay_s: would run now
    ({"handler": "echo", "tasks": [1], "priority": "50"}, "priority"),
    ({"handler": "echo", "tasks": [1], "priority": True}, "priority"),
    ({"handler": "echo", "tasks": [1], "any_handler": "yes"}, "any_handler"),
])
def test_a_field_the_schema_lacks_or_of_another_type_is_a_400_naming_it(
    console: Queue, api_operator: Caller, body: dict[str, Any], names: str
) -> None:
    handlers.announce(console, "w-api", ["echo"])
    r = api_operator.post("/queues/default/requests", body)
    assert r.status_code == 400, r.content
    assert names in r.json()["message"] and "body.body" not in r.json()["message"]
    assert sum(read.stats(console).requests_by_state.values()) == 0


def test_a_misspelt_filter_previews_nothing_and_a_misspelt_dry_run_cleans_nothing(
    world: World, api_operator: Caller
) -> None:
    r = api_operator.post("/queues/default/bulk", {"action": "cancel",
                                                   "filter": {"tenant": "acme"}})
    assert r.status_code == 400 and "filter" in r.json()["message"], r.content
    assert not BulkAction.objects.exists()
    r = api_operator.post("/queues/default/staging/clean", {"dryRun": True})
    assert r.status_code == 400 and "dryRun" in r.json()["message"]
    assert not AuditEntry.objects.filter(action="datajob-clean").exists()
    raw = api_operator.post("/queues/default/requests",
                            raw='{"handler": "echo", "tasks": [1], "delay_s": NaN}')
    assert raw.status_code == 400


def test_what_is_not_there_is_a_404(world: World, api_operator: Caller,
                                    api_admin: Caller) -> None:
    for path in ("/queues/default/requests/nosuch/cancel",
                 "/queues/default/requests/nosuch/run-now",
                 "/queues/default/requests/nosuch/requeue", "/queues/nosuchq/pause",
                 "/queues/nosuchq/dead/requeue", "/bulk/99999/confirm",
                 "/queues/default/schedules/nosuch/pause", "/alerts/rules/nosuch/enable"):
        caller = api_admin if "pause" in path or "alerts" in path else api_operator
        body = {"ids": ["1-1"]} if path.endswith("dead/requeue") else {}
        r = caller.post(path, body)
        assert r.status_code == 404, (path, r.status_code, r.content)
        assert "no" in r.json()["message"], path
    assert api_operator.get("/queues/default/requests/nosuch/events").status_code == 404
    assert api_operator.get("/bulk/99999").status_code == 404
    assert not AuditEntry.objects.filter(action="cancel").exists()
    # A request the queue holds but the history has not caught up with: its events, none yet.
    fresh = world.q.submit([1], handler="echo").request_id
    assert api_operator.get(f"/queues/default/requests/{fresh}/events").json() == []


def test_a_confirm_with_another_count_than_the_previews_is_refused(
    world: World, api_operator: Caller
) -> None:
    preview = api_operator.post("/queues/default/bulk", {
        "action": "requeue", "filters": {"request": world.failed}}).json()
    assert preview["count"] == 3
    r = api_operator.post(f"/bulk/{preview['id']}/confirm", {"count": 4})
    assert r.status_code == 400 and "not the preview's (3)" in r.json()["message"]
    assert BulkAction.objects.get(pk=preview["id"]).status == "previewed"
    r = api_operator.post(f"/bulk/{preview['id']}/confirm", {"count": 3})
    assert r.status_code == 200 and r.json()["status"] == "running"


def test_every_answer_under_the_api_is_json(api_operator: Caller, settings: Any) -> None:
    headers = {"Authorization": f"Bearer {api_operator.token}"}
    c = Client()
    for path in ("/nosuch", "/queues/", "/queues/default/requests/a%2Fb"):
        r = c.get(API + path, headers=headers)
        assert r.status_code == 404 and "no such endpoint" in r.json()["message"], path
    r = c.put(API + "/queues/default/requests/x/cancel", headers=headers)
    assert r.status_code == 405 and "POST" in r["Allow"] and "PUT" in r.json()["message"]
    r = c.post(API + "/queues/default/requests", "handler=echo", headers=headers,
               content_type="application/x-www-form-urlencoded")
    assert r.status_code == 400 and "Content-Type: application/json" in r.json()["message"]
    r = c.post(API + "/queues/default/requests", '{"handler": ', headers=headers,
               content_type="application/json")
    assert r.status_code == 400 and "not valid JSON" in r.json()["message"]
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    big = json.dumps({"handler": "echo", "tasks": ["x" * 100] * 200})
    r = c.post(API + "/queues/default/requests", big, headers=headers,
               content_type="application/json")
    assert r.status_code == 413 and "10,000 bytes" in r.json()["message"]


def test_waits_past_the_processes_share_are_a_429_and_never_take_every_thread(
    console: Queue, api_reader: Caller, settings: Any
) -> None:
    settings.API_WAITERS = 1
    rid = console.submit([1], handler="echo").request_id
    with request_endpoints._waiting():  # another call waits already
        r = api_reader.get(f"/queues/default/requests/{rid}", wait=5)
        assert r.status_code == 429 and r["Retry-After"] == "1", r.content
        assert "waiting" in r.json()["message"]
        assert api_reader.get(f"/queues/default/requests/{rid}").status_code == 200  # no wait
    r = api_reader.get(f"/queues/default/requests/{rid}", wait=0.05)
    assert r.status_code == 200 and r.json()["finished"] is False


def test_a_page_before_the_first_dead_letter_is_empty(world: World, api_reader: Caller) -> None:
    r = api_reader.get("/queues/default/dead", before="0-0")
    assert r.status_code == 200 and r.json() == []


def test_a_refusal_blames_the_users_permission_when_the_tokens_scope_allows_it(
    console: Queue,
) -> None:
    opal = token_for("opal", "operator", "admin")  # an admin token of an operator
    r = opal.post("/queues/default/pause")
    assert r.status_code == 403
    message = r.json()["message"]
    assert "allows it, but its user does not hold that permission" in message
    assert "needs at least" not in message

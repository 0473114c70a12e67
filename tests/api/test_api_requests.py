"""The API's endpoints over the console's queue: submit (201, idempotent, delayed), a request
and waiting for it, its tasks, results and dead letters' requeue, cancel; bad input is a 400
with a message, an unknown request a 404; the schema and its docs page need no token and load
nothing from another site."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest
from django.test import Client

from core.models import AuditEntry
from core.queue import Queue, handlers, read
from tests.api_support import Caller
from tests.console_support import fail_tasks

pytestmark = pytest.mark.django_db


def _announce(q: Queue, *names: str) -> None:
    handlers.announce(q, "w-api", list(names))


def test_submit_is_201_with_the_request_id_and_audited_under_the_tokens_name(
    console: Queue, api_operator: Caller
) -> None:
    _announce(console, "echo")
    r = api_operator.post("/queues/default/requests",
                          {"handler": "echo", "tasks": [{"n": 1}, {"n": 2}], "priority": 50,
                           "tenant": "acme", "request_id": "api-1"})
    assert r.status_code == 201, r.content
    assert r.json()["request_id"] == "api-1" and r.json()["created"] is True
    got = api_operator.get("/queues/default/requests/api-1").json()
    assert got["state"] == "active" and got["total"] == 2 and got["priority"] == 50
    assert got["tenant"] == "acme" and read.request(console, "api-1").total == 2
    again = api_operator.post("/queues/default/requests",
                              {"handler": "echo", "tasks": [{"n": 9}], "request_id": "api-1"})
    assert again.status_code == 201 and again.json()["created"] is False
    entries = AuditEntry.objects.filter(action="submit").order_by("id")
    assert [(e.actor, e.acted) for e in entries] == [(f"token:{api_operator.name}", 1),
                                                     (f"token:{api_operator.name}", 0)]


def test_a_handler_no_worker_runs_is_a_400_unless_any_handler(
    console: Queue, api_operator: Caller
) -> None:
    r = api_operator.post("/queues/default/requests", {"handler": "nope", "tasks": [1]})
    assert r.status_code == 400 and "runs handler 'nope'" in r.json()["message"]
    r = api_operator.post("/queues/default/requests",
                          {"handler": "nope", "tasks": [1], "any_handler": True,
                           "delay_s": 3600})
    assert r.status_code == 201 and r.json()["state"] == "scheduled"


@pytest.mark.parametrize("body", [
    {"tasks": [1]}, {"handler": "echo"}, {"handler": "echo", "tasks": []},
    {"handler": "echo", "tasks": [1], "priority": 100}, {"handler": "echo", "tasks": "x"},
    {"handler": "echo", "tasks": [1], "request_id": "a b"},
    {"handler": "echo", "tasks": [{"big": "x" * 70_000}], "any_handler": True},
    {"handler": "echo", "tasks": [1], "delay_s": 5, "run_at": "2030-01-01T00:00:00Z"},
])
def test_bad_input_is_a_400_with_a_message_and_nothing_submitted(
    console: Queue, api_operator: Caller, body: dict[str, Any]
) -> None:
    _announce(console, "echo")
    r = api_operator.post("/queues/default/requests", body)
    assert r.status_code == 400, (body, r.content)
    assert r.json()["message"]
    st = read.stats(console)
    assert (st.waiting, st.scheduled, sum(st.requests_by_state.values())) == (0, 0, 0)


def test_junk_bodies_paths_and_parameters_are_4xx_never_5xx(
    console: Queue, api_operator: Caller
) -> None:
    for raw in ("{", "null", "[]", '"x"', "\x00", '{"handler": NaN}'):
        r = api_operator.post("/queues/default/requests", raw=raw)
        assert r.status_code == 400, (raw, r.content)
    for path in ("/queues/a%20b/requests/x", "/queues/default/requests/%00",
                 "/queues/nope/requests/x", "/queues/default/requests/x?wait=-1",
                 "/queues/default/requests/x?wait=abc", "/queues/default/dead?before=zz",
                 "/bulk/abc", "/search?q=" + "x" * 300):
        r = api_operator.get(path)
        assert 400 <= r.status_code < 500, (path, r.status_code, r.content)
        assert "message" in r.json()


def test_a_nul_character_anywhere_is_a_400_before_it_reaches_the_database(
    console: Queue, api_operator: Caller
) -> None:
    # PostgreSQL refuses NUL in any text: a filter or an audit entry's target holding one
    # was a 500 there (found by the fuzz test on PostgreSQL).
    for path in ("/search?q=x&queue=%00", "/audit?user=%00", "/queues/%00/handlers"):
        r = api_operator.get(path)
        assert r.status_code == 400 and "NUL" in r.json()["message"], path
    r = api_operator.post("/queues/default/dead/requeue", {"ids": ["\x00"]})
    assert r.status_code == 400 and "NUL" in r.json()["message"]
    r = api_operator.post("/queues/default/requests", raw='{"handler": "echo\\u0000"}')
    assert r.status_code == 400
    assert not AuditEntry.objects.filter(action="requeue").exists()


def test_a_time_past_the_calendar_in_utc_is_a_400(console: Queue, api_admin: Caller) -> None:
    # 2000-01-01T00:00+16:00 once reached PostgreSQL as it was, and was a 500 there.
    assert api_admin.get("/audit", until="2000-01-01T00:00:00+16:00").status_code == 200
    r = api_admin.get("/audit", since="0001-01-01T00:00:00+01:00")
    assert r.status_code == 400 and "years 1 to 9999" in r.json()["message"]


def test_an_unknown_request_is_a_404(console: Queue, api_reader: Caller) -> None:
    r = api_reader.get("/queues/default/requests/nothing-here")
    assert r.status_code == 404 and "nothing-here" in r.json()["message"]


def test_wait_answers_as_soon_as_the_request_finishes(
    console: Queue, api_reader: Caller
) -> None:
    rid = console.submit([{"n": 1}], handler="echo").request_id

    def work() -> None:
        time.sleep(0.5)
        [lease] = console.dequeue("w-1", 1)
        console.ack(lease, {"ok": 1})

    threading.Thread(target=work).start()
    started = time.monotonic()
    got = api_reader.get(f"/queues/default/requests/{rid}", wait=10).json()
    took = time.monotonic() - started
    assert got["state"] == "done" and got["finished"] and 0.4 < took < 5
    results = api_reader.get(f"/queues/default/requests/{rid}/results").json()
    assert list(results["results"].values()) == [{"ok": 1}]


def test_wait_returns_unfinished_when_the_time_runs_out_capped_by_the_setting(
    console: Queue, api_reader: Caller, settings: Any
) -> None:
    settings.API_WAIT_MAX_S = 0.3
    rid = console.submit([{"n": 1}], handler="echo").request_id
    started = time.monotonic()
    got = api_reader.get(f"/queues/default/requests/{rid}", wait=600).json()
    assert got["finished"] is False and got["state"] == "active"
    assert time.monotonic() - started < 3


def test_cancel_tasks_dead_letters_and_requeue(console: Queue, api_operator: Caller) -> None:
    rid = console.submit([{"n": i} for i in range(3)], handler="echo", max_attempts=1,
                         request_id="bad-1").request_id
    fail_tasks(console, rid, 3)
    tasks = api_operator.get(f"/queues/default/requests/{rid}/tasks").json()["tasks"]
    assert {t["consumer"] for t in tasks} == {"~dead"} and len(tasks) == 3
    dead = api_operator.get("/queues/default/dead").json()
    assert len(dead) == 3 and {d["request_id"] for d in dead} == {rid}
    r = api_operator.post("/queues/default/dead/requeue", {"ids": [dead[0]["id"]]})
    assert r.status_code == 200 and r.json()["acted"] == 1, r.content
    r = api_operator.post(f"/queues/default/requests/{rid}/requeue")
    assert r.json()["acted"] == 2
    assert api_operator.get(f"/queues/default/requests/{rid}").json()["waiting"] == 3
    r = api_operator.post(f"/queues/default/requests/{rid}/cancel")
    assert r.json()["acted"] == 1 and r.json()["message"].startswith("cancelled 1 of 1")
    assert api_operator.get(f"/queues/default/requests/{rid}").json()["state"] == "cancelled"
    r = api_operator.post("/queues/default/dead/delete", {"ids": [dead[0]["id"]]})
    assert r.status_code == 403  # an admin's


def test_the_schema_and_docs_need_no_token_and_load_nothing_from_elsewhere(db: Any) -> None:
    c = Client()
    schema = c.get("/api/v1/openapi.json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/queues/{queue}/requests" in paths
    assert "/api/v1/queues/{queue}/requests/{request_id}/cancel" in paths
    page = c.get("/api/v1/docs")
    assert page.status_code == 200
    html = page.content.decode()
    sources = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sources and all(s.startswith("/") for s in sources), sources
    assert "cdn" not in html.lower()
    assert c.get("/api/v1/queues").status_code == 401  # but everything else does


@pytest.mark.slow  # the Redis client retries its connection before it gives up: seconds
def test_redis_down_is_a_503_with_a_message_not_a_traceback(
    db: Any, api_operator: Caller, settings: Any
) -> None:
    from core.procs import free_port

    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    r = api_operator.get("/queues/default/requests/r-1")
    assert r.status_code == 503 and "Redis" in r.json()["message"]
    r = api_operator.post("/queues/default/requests", {"handler": "echo", "tasks": [1]})
    assert r.status_code == 503 and "Traceback" not in r.json()["message"]

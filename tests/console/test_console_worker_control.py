"""The workers page's control (issue 20, part 5): an admin's Quiet, Stop (asked first) and
Resume, each a POST with CSRF checked against core.control_worker and audited; operators and
viewers have no buttons and a forged POST is a 403 (audited); the rows show what each worker
publishes (busy, CPU, memory, uptime, version) and whether it is quiet."""

from __future__ import annotations

import html as htmllib
import re
from typing import Any

import pytest
from django.test import Client

from core.models import AuditEntry
from core.queue import Queue, read
from tests.console_support import field

pytestmark = pytest.mark.django_db

INFO = {"host": "h", "pid": 7, "slots": 2, "queues": ["default"], "dead_after_ms": 10_000,
        "started": 1_700_000_000, "version": "1.2.3", "rss": 123 * 2**20, "cpu": 12.4,
        "util": 49.6, "quiet": False, "processed": 3, "failed": 1}


@pytest.fixture
def q(console: Queue) -> Queue:
    console.heartbeat("w-1", INFO)
    return console


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def post(client: Client, action: str, **data: Any) -> Any:
    """Submit the workers page's form to /actions/<action>/ as its button does."""
    page = client.get("/workers/").content.decode()
    data = {"queue": "default", "nonce": field(page, "nonce"), "next": "/workers/", **data}
    return client.post(f"/actions/{action}/", data, follow=True)


def row(html: str, name: str) -> str:
    m = re.search(rf'<tr id="worker-{re.escape(name)}".*?</tr>', html, re.S)
    assert m, f"no row for {name}"
    return m.group(0)


def test_a_row_shows_busy_cpu_memory_uptime_and_version(q: Queue, admin: Client) -> None:
    r = row(text(admin.get("/workers/")), "w-1")
    assert ">50%<" in r and ">12%<" in r and "123 MiB" in r and "1.2.3" in r
    assert re.search(r"<td class=\"n\">\d+ d \d+ h</td>", r)  # up since 2023
    assert 'formaction="/actions/worker-quiet/"' in r
    assert 'formaction="/actions/worker-stop/"' in r
    assert "worker-resume" not in r


def test_junk_in_a_heartbeat_shows_as_a_dash(q: Queue, admin: Client) -> None:
    q.heartbeat("w-1", INFO | {"rss": "lots", "cpu": float("inf"), "util": [1]})
    r = row(text(admin.get("/workers/")), "w-1")
    assert r.count('<td class="n">—</td>') == 3  # busy, CPU, memory


def test_quiet_then_resume_from_the_page_is_asked_shown_and_audited(
    q: Queue, admin: Client
) -> None:
    done = post(admin, "worker-quiet", worker="w-1")
    assert done.redirect_chain[-1][0].startswith("/workers/")
    assert "worker w-1: quiet asked; within 2 s" in text(done)
    assert q.worker_control("w-1") == "quiet"
    r = row(text(admin.get("/workers/")), "w-1")
    assert "quiet asked" in r and 'formaction="/actions/worker-resume/"' in r
    q.heartbeat("w-1", INFO | {"quiet": True})  # what the worker says at its next beat
    r = row(text(admin.get("/workers/")), "w-1")
    assert ">quiet<" in r and "worker-quiet" not in r
    assert "worker w-1: resumed" in text(post(admin, "worker-resume", worker="w-1"))
    assert q.worker_control("w-1") == ""
    again = post(admin, "worker-resume", worker="w-1")
    assert "worker w-1 was not quiet; nothing changed" in text(again)
    entries = list(AuditEntry.objects.order_by("id").values_list(
        "actor", "source", "action", "queue", "target", "acted", "skipped"))
    assert entries == [
        ("ada", "console", "worker-quiet", "default", "worker w-1", 1, 0),
        ("ada", "console", "worker-resume", "default", "worker w-1", 1, 0),
        ("ada", "console", "worker-resume", "default", "worker w-1", 0, 1),
    ]


def test_stop_asks_first_then_acts_and_is_final(q: Queue, admin: Client) -> None:
    asked = post(admin, "worker-stop", worker="w-1")
    assert asked.status_code == 200 and "Stop worker w-1?" in text(asked)
    assert q.worker_control("w-1") == ""  # not yet
    assert AuditEntry.objects.count() == 0
    page = admin.get("/workers/").content.decode()
    done = admin.post("/actions/worker-stop/", {
        "queue": "default", "worker": "w-1", "confirmed": "1", "next": "/workers/",
        "nonce": field(page, "nonce")}, follow=True)
    assert "worker w-1: stop asked" in text(done)
    assert q.worker_control("w-1") == "stop"
    r = row(text(done), "w-1")
    assert "stop asked" in r and "worker-quiet" not in r and "worker-stop" not in r
    refused = post(admin, "worker-quiet", worker="w-1")
    assert "Nothing done: worker 'w-1' is stopping" in text(refused)
    assert q.worker_control("w-1") == "stop"


def test_a_worker_that_left_since_the_page_was_drawn_is_a_warning(
    q: Queue, admin: Client
) -> None:
    q.unregister("w-1")
    done = post(admin, "worker-quiet", worker="w-1")
    assert done.status_code == 200
    assert "Nothing done: worker 'w-1' is not registered in queue 'default'" in text(done)
    [entry] = AuditEntry.objects.all()
    assert entry.action == "worker-quiet" and entry.acted == 0 and "not registered" in entry.error


@pytest.mark.parametrize("who", ["operator", "viewer"])
def test_operators_and_viewers_have_no_buttons_and_a_forged_post_is_403_and_audited(
    q: Queue, who: str, request: pytest.FixtureRequest
) -> None:
    client: Client = request.getfixturevalue(who)
    page = client.get("/workers/").content.decode()
    assert "worker-quiet" not in page and "worker-stop" not in page
    for action in ("worker-quiet", "worker-stop", "worker-resume"):
        response = client.post(f"/actions/{action}/", {"queue": "default", "worker": "w-1",
                                                       "confirmed": "1"})
        assert response.status_code == 403
    assert q.worker_control("w-1") == ""
    refusals = AuditEntry.objects.filter(refused=True).order_by("id")
    assert [e.action for e in refusals] == ["worker-quiet", "worker-stop", "worker-resume"]
    assert all("core.control_worker" in e.error for e in refusals)


def test_the_form_posts_only_with_csrf(q: Queue, admin: Client) -> None:
    from django.contrib.auth.models import User

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.get(username="ada"))
    response = strict.post("/actions/worker-quiet/", {"queue": "default", "worker": "w-1"})
    assert response.status_code == 403
    assert q.worker_control("w-1") == ""
    token = field(strict.get("/workers/").content.decode(), "csrfmiddlewaretoken")
    ok = strict.post("/actions/worker-quiet/", {"queue": "default", "worker": "w-1",
                                                "csrfmiddlewaretoken": token})
    assert ok.status_code == 302 and q.worker_control("w-1") == "quiet"


def test_bad_worker_names_are_a_400(q: Queue, admin: Client) -> None:
    for junk in ("", "a b", "x" * 300, "<script>"):
        response = admin.post("/actions/worker-quiet/", {"queue": "default", "worker": junk})
        assert response.status_code == 400, junk
    assert AuditEntry.objects.count() == 0


def test_an_admins_quiet_reaches_a_real_worker_within_a_heartbeat(
    console: Queue, live_queue: Queue, admin: Client, spawn_worker: Any,
    wait_until: Any, prefix: str,
) -> None:
    spawn_worker("w-real", "--dead-after", "1")
    # Its heartbeat registers the worker, then its queue's name (for the console's queue list).
    wait_until(lambda: read.worker(live_queue, "w-real") is not None
               and "q" in read.queues(live_queue.redis, prefix=prefix), 15,
               "the worker and its queue to register")
    page = admin.get("/workers/?queue=q").content.decode()
    response = admin.post("/actions/worker-quiet/", {
        "queue": "q", "worker": "w-real", "nonce": field(page, "nonce"),
        "next": "/workers/?queue=q"})
    assert response.status_code == 302
    def quiet() -> bool:
        found = read.worker(live_queue, "w-real")
        return found is not None and found.info.get("quiet") is True

    wait_until(quiet, 2, "the worker to say it is quiet (it beats every 0.2 s)")
    live_queue.submit([{"k": f"{prefix}:t", "seconds": 0}], request_id="r", handler="tracked")
    r = row(text(admin.get("/workers/?queue=q")), "w-real")
    assert ">quiet<" in r
    admin.post("/actions/worker-resume/", {"queue": "q", "worker": "w-real"})
    assert live_queue.wait("r", timeout=10) == "done"

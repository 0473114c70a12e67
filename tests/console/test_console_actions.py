"""The console's direct actions, through the pages as an operator uses them: each button's
POST acts and comes back with the service layer's message; a viewer has no buttons and a
forged POST is a 403 (audited); a stale page or a second POST acts on nothing; bad input is a
400 with the reason; with Redis down nothing is done and the page says so (503)."""

from __future__ import annotations

import html as htmllib
from typing import Any

import pytest
from django.test import Client

from core.models import AuditEntry
from core.queue import read
from core.stack.redis_server import free_port
from tests.console_support import World, field, has_action_buttons, stats

pytestmark = pytest.mark.django_db


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def post(client: Client, page: str, action: str, **data: Any) -> Any:
    """Open `page`, then submit its form to /actions/<action>/ with the page's nonce and
    return address, and follow the redirect."""
    html = client.get(page).content.decode()
    data = {"queue": "default", "nonce": field(html, "nonce"), "next": page, **data}
    return client.post(f"/actions/{action}/", data, follow=True)


# -- success -------------------------------------------------------------------------------


def test_operator_requeues_selected_dead_letters_and_the_request_reopens(
    operator: Client, world: World
) -> None:
    page = f"/dead/default/{world.fingerprint}/"
    html = operator.get(page).content.decode()
    assert 'formaction="/actions/requeue/"' in html
    assert 'value="requeue"' in html  # the group's bulk button
    assert "/actions/delete/" not in html  # an operator may not delete
    response = post(operator, page, "requeue", dead=world.dead_ids[:2])
    assert response.redirect_chain[-1][0] == page
    body = text(response)
    assert "requeued 2 of 2; 0 skipped" in body
    assert stats(world.q).dead == 1
    assert world.q.state(world.failed) in ("active", "open")
    entry = AuditEntry.objects.latest("id")
    assert (entry.action, entry.acted, entry.actor) == ("requeue", 2, "otto")


def test_one_letters_own_button_requeues_only_it(operator: Client, world: World) -> None:
    page = f"/dead/default/{world.fingerprint}/"
    response = post(operator, page, "requeue", one=world.dead_ids[0], dead=world.dead_ids[1:])
    assert "requeued 1 of 1" in text(response)
    assert stats(world.q).dead == 2


def test_requeue_all_of_a_request_from_its_page(operator: Client, world: World) -> None:
    page = f"/requests/default/{world.failed}/"
    html = operator.get(page).content.decode()
    assert "Requeue its 3 dead tasks" in html
    response = post(operator, page, "requeue-request", request=world.failed)
    assert "requeued 3" in text(response)
    assert stats(world.q).dead == 0


def test_cancel_asks_first_then_cancels(operator: Client, world: World) -> None:
    page = "/requests/"
    html = operator.get(page).content.decode()
    data = {"queue": "default", "nonce": field(html, "nonce"), "next": page,
            "request": [world.running]}
    ask = operator.post("/actions/cancel/", data)
    assert ask.status_code == 200
    asked = text(ask)
    assert "Cancel 1 request?" in asked and world.running in asked
    assert world.q.state(world.running) == "active"  # nothing done yet
    done = operator.post("/actions/cancel/", {**data, "confirmed": "1"}, follow=True)
    assert "cancel" in text(done)
    assert world.q.state(world.running) in ("cancelling", "cancelled")


def test_cancelling_a_finished_request_says_it_was_skipped_and_why(
    operator: Client, world: World
) -> None:
    done = post(operator, "/requests/", "cancel", request=[world.failed], confirmed="1")
    assert "cancelled 0 of 1; 1 skipped. 1 was already finished or cancelled." in text(done)
    assert world.q.state(world.failed) == "failed"


def test_release_a_pending_entry_from_the_pending_page(operator: Client, world: World) -> None:
    html = operator.get("/pending/").content.decode()
    value = f"{world.running}/{world.live_task}/w-live/"
    assert value in html
    entry = next(v for v in html.split('value="') if v.startswith(value)).split('"')[0]
    before = stats(world.q).leased
    response = post(operator, "/pending/", "release", entry=[entry])
    assert "released 1 of 1" in text(response)
    assert stats(world.q).leased == before - 1


def test_claim_gives_an_entry_to_another_worker(operator: Client, world: World) -> None:
    page = f"/requests/default/{world.running}/"
    entry = f"{world.running}/{world.stale_task}/w-stale/0"
    response = post(operator, page, "claim", entry=[entry], to="w-live")
    assert "1 of 1" in text(response)
    q = world.q
    # It goes to w-live once w-stale has stopped its run (or the lease expired).
    [row] = [e for e in read.pending(q, world.running) if e.task_id == world.stale_task]
    assert row.consumer == "w-stale" and row.moves_by_ms
    assert "moves on by" in operator.get(page).content.decode()
    assert q.release([f"{world.running}/{world.stale_task}/1"]) == [-1]  # w-stale stopped
    rows = q.redis.xpending_range(q.keys.tasks(world.running), "g",
                                  world.stale_task, world.stale_task, 1)
    assert rows[0]["consumer"] == "w-live"


def test_release_everything_a_stale_worker_holds_in_one_click(
    operator: Client, world: World
) -> None:
    html = operator.get("/workers/").content.decode()
    assert "Release its 1 task" in html
    response = post(operator, "/workers/", "release-worker", worker="w-stale",
                    **{"held:w-stale": [f"{world.running}/{world.stale_task}"]})
    assert "released 1 of 1" in text(response)


def test_reclaim_a_gone_worker(operator: Client, world: World) -> None:
    q = world.q
    q.redis.zadd(q.keys.workers, {"w-stale": q.now_ms() - 60_000})  # now past its dead-after
    html = operator.get("/workers/").content.decode()
    assert 'formaction="/actions/reclaim/"' in html
    response = post(operator, "/workers/", "reclaim", worker="w-stale")
    assert response.status_code == 200
    assert q.redis.zscore(q.keys.workers, "w-stale") is None


def test_reclaim_of_a_worker_that_beat_again_is_refused_as_stale(
    operator: Client, world: World
) -> None:
    response = post(operator, "/workers/", "reclaim", worker="w-live")
    assert response.status_code == 200
    assert "Nothing done" in text(response)
    assert world.q.redis.zscore(world.q.keys.workers, "w-live") is not None


def test_admin_pauses_and_the_pause_shows_on_every_page(admin: Client, world: World) -> None:
    response = post(admin, "/requests/", "pause", confirmed="1")  # asks first: test_console_pause
    assert response.status_code == 200
    for page in ("/", "/requests/", "/pending/", "/dead/", "/workers/", "/audit/"):
        body = text(admin.get(page))
        assert "Queue default is paused" in body, page
    post(admin, "/requests/", "resume")
    assert "is paused" not in text(admin.get("/requests/"))


def test_admin_deletes_after_confirming(admin: Client, world: World) -> None:
    page = f"/dead/default/{world.fingerprint}/"
    html = admin.get(page).content.decode()
    data = {"queue": "default", "nonce": field(html, "nonce"), "next": page,
            "dead": world.dead_ids[:1]}
    ask = admin.post("/actions/delete/", data)
    assert "Delete 1 dead letter?" in text(ask)
    assert stats(world.q).dead == 3
    done = admin.post("/actions/delete/", {**data, "confirmed": "1"}, follow=True)
    assert "deleted 1 of 1" in text(done)
    assert stats(world.q).dead == 2


# -- stale state and the second POST -------------------------------------------------------


def test_a_stale_page_skips_and_says_why(operator: Client, world: World) -> None:
    page = f"/dead/default/{world.fingerprint}/"
    html = operator.get(page).content.decode()
    world.q.requeue(world.dead_ids[:2])  # someone else, meanwhile
    response = operator.post("/actions/requeue/", {
        "queue": "default", "nonce": field(html, "nonce"), "next": page,
        "dead": world.dead_ids}, follow=True)
    body = text(response)
    assert "requeued 1 of 3; 2 skipped" in body
    assert "2 were no longer dead: someone else acted first" in body


def test_a_second_post_of_the_same_form_is_already_done(operator: Client, world: World) -> None:
    page = f"/dead/default/{world.fingerprint}/"
    html = operator.get(page).content.decode()
    data = {"queue": "default", "nonce": field(html, "nonce"), "next": page,
            "dead": world.dead_ids}
    operator.post("/actions/requeue/", data)
    entries = AuditEntry.objects.count()
    again = operator.post("/actions/requeue/", data, follow=True)
    assert "Already done, nothing done again: requeued 3 of 3" in text(again)
    assert AuditEntry.objects.count() == entries  # the service layer was not called again


# -- permissions ---------------------------------------------------------------------------


def test_a_viewer_sees_no_action_button_anywhere(viewer: Client, world: World) -> None:
    for page in ("/", "/requests/", f"/requests/default/{world.running}/",
                 f"/requests/default/{world.failed}/", "/pending/", "/dead/",
                 f"/dead/default/{world.fingerprint}/", "/workers/", "/audit/"):
        response = viewer.get(page)
        assert response.status_code == 200, page
        html = response.content.decode()
        assert not has_action_buttons(html), page
        assert "data-select" not in html, page
        assert 'href="/audit/' in html  # the audit log is in the nav


@pytest.mark.parametrize(("action", "data"), [
    ("requeue", {"dead": ["1-0"]}),
    ("delete", {"dead": ["1-0"]}),
    ("cancel", {"request": ["run-1"]}),
    ("release", {"entry": ["run-1/1-0/w-live/0"]}),
    ("claim", {"entry": ["run-1/1-0/w-live/0"], "to": "w-x"}),
    ("reclaim", {"worker": "w-stale"}),
    ("pause", {}),
])
def test_a_forged_post_without_permission_is_403_and_audited(
    viewer: Client, world: World, action: str, data: dict[str, Any]
) -> None:
    dead_before = stats(world.q).dead
    response = viewer.post(f"/actions/{action}/", {"queue": "default", **data})
    assert response.status_code == 403
    assert "Not allowed" in text(response)
    assert AuditEntry.objects.filter(refused=True, actor="vera").exists()
    assert stats(world.q).dead == dead_before
    assert world.q.state(world.running) == "active"


def test_an_operator_may_not_delete_or_pause(operator: Client, world: World) -> None:
    assert operator.post("/actions/delete/", {"queue": "default", "dead": world.dead_ids[:1],
                                             "confirmed": "1"}).status_code == 403
    assert operator.post("/actions/pause/", {"queue": "default"}).status_code == 403
    assert stats(world.q).dead == 3


def test_get_never_acts(operator: Client, world: World) -> None:
    response = operator.get(f"/actions/requeue/?queue=default&dead={world.dead_ids[0]}")
    assert response.status_code == 405
    assert stats(world.q).dead == 3


# -- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(("action", "data", "says"), [
    ("requeue", {}, "Select at least one dead letter"),
    ("requeue", {"dead": ["<script>"]}, "Bad dead letter id"),
    ("cancel", {"request": ["bad id{"], "confirmed": "1"}, "Bad request id"),
    ("release", {"entry": ["junk"]}, "Bad pending entry"),
    ("release", {"entry": ["run-1/1-0/w-live/abc"]}, "Bad pending entry"),
    ("claim", {"entry": ["run-1/1-0/w-live/0"]}, "Name the live worker"),
    ("claim", {"entry": ["run-1/1-0/w-live/0"], "to": "<b>"}, "Bad consumer"),
    ("reclaim", {}, "No worker given"),
    ("requeue", {"dead": ["1-0"], "queue": "nosuch"}, "no queue named"),
])
def test_bad_input_is_a_400_with_the_reason(
    operator: Client, world: World, action: str, data: dict[str, Any], says: str
) -> None:
    response = operator.post(f"/actions/{action}/", {"queue": "default", **data})
    assert response.status_code in (400, 404), response.content[-500:]
    body = text(response)
    assert says in body
    assert "<script>" not in response.content.decode()
    assert stats(world.q).dead == 3


def test_an_unknown_action_is_404(operator: Client, world: World) -> None:
    assert operator.post("/actions/explode/", {"queue": "default"}).status_code == 404


def test_next_never_leaves_the_site(operator: Client, world: World) -> None:
    response = operator.post("/actions/requeue/", {
        "queue": "default", "dead": world.dead_ids[:1], "next": "https://evil.example/"})
    assert response.status_code == 302
    assert response["Location"].startswith("/dead/")


# -- Redis down ----------------------------------------------------------------------------


def test_redis_down_is_a_503_banner_and_nothing_done(
    operator: Client, world: World, settings: Any
) -> None:
    good = settings.REDIS_URL
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"  # clients are kept per URL
    try:
        response = operator.post("/actions/requeue/", {"queue": "default",
                                                       "dead": world.dead_ids})
        assert response.status_code == 503
        assert 'class="banner"' in response.content.decode()
        assert "cannot be reached" in text(response)
    finally:
        settings.REDIS_URL = good
    assert stats(world.q).dead == 3


def test_action_pages_escape_what_was_posted_and_keep_the_csp(
    operator: Client, world: World
) -> None:
    hostile_next = '/requests/?x="><script>alert(1)</script>'
    ask = operator.post("/actions/cancel/", {"queue": "default", "request": [world.running],
                                             "next": hostile_next})
    html = ask.content.decode()
    assert ask.status_code == 200
    assert "<script>alert" not in html and "&lt;script&gt;" in html
    assert " style=" not in html and "<style" not in html
    assert "unsafe-inline" not in ask["Content-Security-Policy"]
    done = operator.post("/actions/cancel/", {"queue": "default", "request": [world.running],
                                              "next": hostile_next, "confirmed": "1"})
    assert done.status_code == 302  # a path of ours: followed, quoted
    assert done["Location"] == "/requests/?x=%22%3E%3Cscript%3Ealert(1)%3C/script%3E"


def test_the_pages_forms_post_only_with_csrf(world: World, db: Any) -> None:
    from django.contrib.auth.models import User

    from tests.console_support import logged_in_client

    logged_in_client("otto2", "operator")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(User.objects.get(username="otto2"))
    response = strict.post("/actions/requeue/", {"queue": "default", "dead": world.dead_ids})
    assert response.status_code == 403
    assert stats(world.q).dead == 3
    page = strict.get(f"/dead/default/{world.fingerprint}/").content.decode()
    token = field(page, "csrfmiddlewaretoken")
    ok = strict.post("/actions/requeue/", {"queue": "default", "dead": world.dead_ids,
                                           "csrfmiddlewaretoken": token})
    assert ok.status_code == 302
    assert stats(world.q).dead == 0


def test_an_account_outside_the_groups_is_refused_and_audited(world: World, db: Any) -> None:
    from tests.console_support import logged_in_client

    nobody = logged_in_client("nora", None)
    response = nobody.post("/actions/requeue/", {"queue": "default", "dead": world.dead_ids})
    assert response.status_code == 403
    assert AuditEntry.objects.filter(refused=True, actor="nora", action="requeue").exists()
    junk = nobody.post("/actions/requeue/", {"queue": "default", "dead": ["junk"]})
    assert junk.status_code == 403  # not a 400 that would say what the form expects
    assert nobody.post("/actions/preview/", {"queue": "default", "action": "requeue",
                                             "since": "junk"}).status_code == 403
    assert stats(world.q).dead == 3

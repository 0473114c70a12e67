"""Bulk actions from the console (preview with the exact count and a sample, typed
confirmation above 1,000, confirm, progress, stop, a second confirm that starts nothing) and
the audit log page (filters, keyset paging, bad parameters, escaping)."""

from __future__ import annotations

import datetime as dt
import html as htmllib
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from core.models import AuditEntry
from tests.console_support import HOSTILE, World, fail_tasks, stats
from tests.mirror_support import mirror

pytestmark = pytest.mark.django_db


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def preview(client: Client, action: str, **filters: Any) -> Any:
    response = client.post("/actions/preview/", {"queue": "default", "action": action,
                                                 **filters})
    assert response.status_code == 302, response.content[-600:]
    assert re.fullmatch(r"/actions/bulk/\d+/", response["Location"])
    return response["Location"]


def run_actions() -> None:
    call_command("runactions", "--burst", verbosity=0)


def test_requeue_a_fingerprint_group_preview_confirm_progress(
    operator: Client, world: World
) -> None:
    url = preview(operator, "requeue", fingerprint=world.fingerprint)
    page = operator.get(url)
    body = text(page)
    assert page.status_code == 200
    assert "Preview" in body and "nothing has been done yet" in body
    assert re.search(r"data-count>3<", page.content.decode())
    assert world.failed in body  # the sample
    assert "fingerprint" in body  # the filter in words
    assert "typed_count" not in body  # 3 needs no typed count
    assert 'name="rate"' in body  # a requeue may be rate-limited
    assert stats(world.q).dead == 3  # a preview does nothing
    confirm = operator.post(f"{url}confirm/", {"rate": ""})
    assert confirm.status_code == 302 and confirm["Location"] == url
    running = text(operator.get(url))
    assert "running" in running and "Stop" in running
    run_actions()
    done = operator.get(url)
    assert "Finished: 3 of 3 requeued; 0 skipped." in text(done)
    assert stats(world.q).dead == 0
    assert world.q.state(world.failed) in ("active", "open")
    # The progress fragment as htmx polls it: finished, so it stops polling (286).
    fragment = operator.get(url, headers={"HX-Request": "true", "HX-Target": "live"})
    assert fragment.status_code == 286
    assert "<nav>" not in fragment.content.decode()


def test_a_second_confirm_starts_nothing_and_says_so(operator: Client, world: World) -> None:
    url = preview(operator, "requeue", fingerprint=world.fingerprint)
    operator.post(f"{url}confirm/")
    again = operator.post(f"{url}confirm/", follow=True)
    assert "Already confirmed" in text(again)
    run_actions()
    assert stats(world.q).dead == 0
    assert AuditEntry.objects.filter(action="requeue", bulk__isnull=False).count() == 1


def test_the_snapshot_is_what_gets_acted_on(operator: Client, world: World) -> None:
    url = preview(operator, "requeue", fingerprint=world.fingerprint)
    late = world.q.submit([{"row": 9}], handler="echo", request_id="bad-2",
                          max_attempts=1, priority=99).request_id
    fail_tasks(world.q, late, 1)  # same error pattern, after the preview
    mirror(world.q)
    operator.post(f"{url}confirm/")
    run_actions()
    assert "3 of 3 requeued" in text(operator.get(url))
    assert stats(world.q).dead == 1  # the late one is still dead


def test_more_than_1000_needs_the_count_typed(operator: Client, world: World) -> None:
    big = world.q.submit([{"row": i} for i in range(1001)], handler="echo",
                         request_id="big-1", max_attempts=1, priority=99).request_id
    fail_tasks(world.q, big, 1001)
    mirror(world.q)
    url = preview(operator, "requeue", request=big)
    html = operator.get(url).content.decode()
    assert 'name="typed_count"' in html and 'data-typed-count="1001"' in html
    missing = operator.post(f"{url}confirm/", {"typed_count": ""})
    assert missing.status_code == 400
    wrong = operator.post(f"{url}confirm/", {"typed_count": "1000"})
    assert wrong.status_code == 400
    assert 'class="form-error"' in wrong.content.decode()
    assert 'value="1000"' in wrong.content.decode()  # what was typed stays in the field
    assert "running" not in text(operator.get(url)).split("Preview")[0]
    ok = operator.post(f"{url}confirm/", {"typed_count": "1001", "rate": "5000"})
    assert ok.status_code == 302
    run_actions()
    assert "1,001 of 1,001 requeued" in text(operator.get(url))


def test_a_bad_rate_is_a_400(operator: Client, world: World) -> None:
    url = preview(operator, "requeue", fingerprint=world.fingerprint)
    response = operator.post(f"{url}confirm/", {"rate": "fast"})
    assert response.status_code == 400
    assert "rate limit must be a whole number" in text(response)


def test_stop_before_the_runner_gets_to_it(operator: Client, world: World) -> None:
    url = preview(operator, "requeue", fingerprint=world.fingerprint)
    operator.post(f"{url}confirm/")
    stopped = operator.post(f"{url}stop/", follow=True)
    assert stopped.status_code == 200
    assert "Stopping" in text(stopped) or "stopped" in text(stopped)
    run_actions()
    body = text(operator.get(url))
    assert "Stopped" in body
    assert stats(world.q).dead + int(re.search(r"(\d+) of 3 requeued", body).group(1)) == 3


def test_stopping_a_preview_never_confirmed_says_nothing_was_done(
    operator: Client, world: World
) -> None:
    url = preview(operator, "requeue", fingerprint=world.fingerprint)
    said = text(operator.post(f"{url}stop/", follow=True))
    assert "Dropped: this preview was never confirmed, so nothing was done" in said
    assert "Stopping" not in said and stats(world.q).dead == 3


def test_cancel_all_matching_a_filter(operator: Client, world: World) -> None:
    html = operator.get("/requests/?state=active").content.decode()
    assert 'value="cancel"' in html
    url = preview(operator, "cancel", state="active")
    body = text(operator.get(url))
    assert world.running in body
    operator.post(f"{url}confirm/")
    run_actions()
    assert world.q.state(world.running) in ("cancelling", "cancelled")


def test_the_preview_escapes_the_filter_in_words(operator: Client, world: World) -> None:
    url = preview(operator, "requeue", tenant=HOSTILE)
    html = operator.get(url).content.decode()
    assert "<script>alert" not in html and "&lt;script&gt;" in html


@pytest.mark.parametrize("data", [{"action": "explode"}, {"action": "requeue",
                                                          "since": "yesterday"}])
def test_a_bad_preview_is_a_400(operator: Client, world: World, data: dict[str, str]) -> None:
    response = operator.post("/actions/preview/", {"queue": "default", **data})
    assert response.status_code == 400


def test_a_viewer_may_not_preview_confirm_or_stop(
    viewer: Client, operator: Client, world: World
) -> None:
    assert viewer.post("/actions/preview/", {"queue": "default", "action": "requeue",
                                             "fingerprint": world.fingerprint}).status_code == 403
    url = preview(operator, "requeue", fingerprint=world.fingerprint)
    page = viewer.get(url)  # a viewer may look at it, with no button
    assert page.status_code == 200 and "confirm/" not in page.content.decode()
    assert viewer.post(f"{url}confirm/").status_code == 403
    assert stats(world.q).dead == 3


def test_an_unknown_bulk_action_is_404(operator: Client, world: World) -> None:
    assert operator.get("/actions/bulk/999999/").status_code == 404
    assert operator.post("/actions/bulk/999999/confirm/").status_code == 404


# -- the audit log -------------------------------------------------------------------------


def test_the_audit_log_lists_actions_newest_first_with_filters(
    operator: Client, viewer: Client, world: World
) -> None:
    operator.post("/actions/requeue/", {"queue": "default", "dead": world.dead_ids[:1]})
    operator.post("/actions/release/", {"queue": "default",
                                        "entry": [f"{world.running}/{world.live_task}/w-live/0"]})
    viewer.post("/actions/requeue/", {"queue": "default", "dead": world.dead_ids[1:2]})
    page = viewer.get("/audit/")
    assert page.status_code == 200
    rows = [int(i) for i in re.findall(r'<tr id="audit-(\d+)"', page.content.decode())]
    assert len(rows) == 3 and rows == sorted(rows, reverse=True)  # ids, not their text: 100 > 99
    body = text(page)
    assert "refused" in body and "otto" in body and "vera" in body
    only_otto = viewer.get("/audit/?user=otto").content.decode()
    assert len(re.findall(r'<tr id="audit-', only_otto)) == 2
    releases = viewer.get("/audit/?action=release").content.decode()
    assert len(re.findall(r'<tr id="audit-', releases)) == 1
    later = (timezone.now() + dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert len(re.findall(r'<tr id="audit-', viewer.get(f"/audit/?since={later}")
                          .content.decode())) == 0
    assert len(re.findall(r'<tr id="audit-', viewer.get(f"/audit/?until={later}")
                          .content.decode())) == 3
    assert not re.search(r'(formaction|action)="/actions/', body)  # read-only


def test_the_audit_log_pages_by_id(viewer: Client, world: World) -> None:
    now = timezone.now()
    AuditEntry.objects.bulk_create(
        AuditEntry(at=now, actor=f"u{i}", source="cli", action="pause", queue="default",
                   target="default", count=1, acted=1) for i in range(60))
    first = viewer.get("/audit/").content.decode()
    ids = re.findall(r'<tr id="audit-(\d+)"', first)
    assert len(ids) == 50
    nxt = re.search(r'href="\?[^"]*after=(\d+)', first)
    assert nxt and nxt.group(1) == ids[-1]
    second = viewer.get(f"/audit/?after={nxt.group(1)}").content.decode()
    more = re.findall(r'<tr id="audit-(\d+)"', second)
    assert len(more) == 10 and not set(more) & set(ids)
    assert max(map(int, more)) < min(map(int, ids))


@pytest.mark.parametrize(("query", "says"), [
    ("action=explode", "action must be one of"),
    ("since=yesterday", "since must be a date"),
    ("until=2026-13-01", "until must be a date"),
    ("since=2026-11-23&until=2026-11-22", "since must be before until"),
    ("after=abc", "Bad page cursor"),
    ("user=" + "x" * 200, "user is longer than"),
])
def test_bad_audit_parameters_are_a_400(viewer: Client, world: World, query: str,
                                        says: str) -> None:
    response = viewer.get(f"/audit/?{query}")
    assert response.status_code == 400
    assert says in text(response)


def test_the_audit_log_escapes_what_it_shows(viewer: Client, world: World) -> None:
    AuditEntry.objects.create(at=timezone.now(), actor=HOSTILE, source="cli", action="cancel",
                              queue="default", target=HOSTILE, count=1, error=HOSTILE)
    html = viewer.get("/audit/").content.decode()
    assert "<script>alert" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3


def test_nobody_outside_the_groups_sees_the_audit_log(db: Any, world: World) -> None:
    from tests.console_support import logged_in_client

    assert logged_in_client("nora", None).get("/audit/").status_code == 403


def test_no_cancel_all_for_a_range_of_finish_times(operator: Client, world: World) -> None:
    # Unfinished requests have no finish time: such a filter matches none of them, and the
    # preview's range would be on creation times instead.
    html = operator.get("/requests/?sort=finished&since=2026-01-01").content.decode()
    assert "Cancel all unfinished" not in html
    assert "Cancel all unfinished" in operator.get("/requests/?since=2026-01-01").content.decode()

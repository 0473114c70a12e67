"""The console's Schedules page (issue 19, item 4): schedules with their words, zone, next
runs and last runs; create with a preview, edit, pause/resume, run now, delete, each
permission-checked (operators run and pause, admins create, edit and delete) and audited."""

from __future__ import annotations

import html as htmllib
from typing import Any

import pytest
from django.test import Client

from core.models import AuditEntry
from core.queue import Queue
from core.queue.schedule.spec import Schedule
from core.queue.schedule.store import Schedules

pytestmark = pytest.mark.django_db


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


@pytest.fixture
def nightly(console: Queue) -> Schedules:
    store = Schedules(console)
    store.upsert(Schedule(name="nightly", queue=console.name, cron="30 2 * * *",
                          tz="Europe/Berlin", handler="echo", tasks=[{"n": 1}]))
    return store


FORM = {"name": "hourly", "kind": "tasks", "handler": "echo", "tasks": '{"n": 1}\n{"n": 2}',
        "timing": "cron", "cron": "0 * * * *", "tz": "Europe/Berlin", "missed": "latest",
        "missed_max": "100", "overlap": "skip"}


def test_the_page_lists_each_schedule_with_words_zone_and_next_runs(
        viewer: Client, nightly: Schedules) -> None:
    html = text(viewer.get("/schedules/"))
    assert 'data-schedule="nightly"' in html
    assert "At 02:30 (Europe/Berlin)" in html
    assert html.count("T02:30") >= 5  # the next five runs, local time
    assert "Run now" not in html and "New schedule" not in html  # a viewer only reads
    assert 'href="/schedules/?queue=default"' in text(viewer.get("/"))  # in the navigation


def test_the_preview_shows_the_next_runs_before_saving(admin: Client, console: Queue) -> None:
    html = text(admin.get("/schedules/preview/", FORM | {"cron": "30 2 * * *"}))
    assert "At 02:30 (Europe/Berlin)" in html and html.count("<li>") == 5
    bad = text(admin.get("/schedules/preview/", FORM | {"tz": "Mars/Olympus"}))
    assert "unknown time zone 'Mars/Olympus'" in bad
    assert "bad cron expression" in text(admin.get("/schedules/preview/", FORM | {"cron": "x"}))
    assert Schedules(console).names() == []  # a preview saves nothing


def test_an_admin_creates_edits_and_deletes(admin: Client, console: Queue) -> None:
    r = admin.post("/schedules/save/", FORM)
    assert r.status_code == 302
    store = Schedules(console)
    st = store.require("hourly")
    assert st.schedule.tasks == [{"n": 1}, {"n": 2}]
    refused = admin.post("/schedules/save/", FORM | {"name": "x", "cron": "61 * * * *"})
    assert refused.status_code == 400
    assert "bad cron expression '61 * * * *'" in text(refused)
    edit = text(admin.get("/schedules/default/hourly/edit/"))
    assert 'value="0 * * * *"' in edit
    r = admin.post("/schedules/save/", FORM | {"cron": "15 * * * *", "original": "hourly",
                                               "version": str(st.version)})
    assert r.status_code == 302 and store.require("hourly").schedule.cron == "15 * * * *"
    stale = admin.post("/schedules/save/", FORM | {"cron": "20 * * * *", "original": "hourly",
                                                   "version": str(st.version)})
    assert stale.status_code == 400 and "changed meanwhile" in text(stale)
    confirm = admin.get("/schedules/default/hourly/delete/")
    assert "Delete schedule hourly?" in text(confirm) and store.get("hourly") is not None
    admin.post("/schedules/default/hourly/delete/", {"confirm": "yes"})
    assert store.get("hourly") is None
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "acted"))
    assert actions == [("schedule-add", 1), ("schedule-edit", 1), ("schedule-edit", 0),
                       ("schedule-remove", 1)]


def test_an_operator_runs_and_pauses_but_may_not_edit(operator: Client, nightly: Schedules,
                                                      console: Queue) -> None:
    html = text(operator.get("/schedules/"))
    assert "Run now" in html and "Pause" in html and "/edit/" not in html
    operator.post("/schedules/default/nightly/run-now/")
    [run] = nightly.runs("nightly")
    assert run.status == "run-now" and run.by == "otto"
    assert console.state(run.request_id or "") in ("waiting", "active")
    html = text(operator.get("/schedules/"))
    assert f'href="/requests/default/{run.request_id}/"' in html  # the last run, linked
    operator.post("/schedules/default/nightly/pause/")
    assert nightly.require("nightly").paused
    assert "data-paused" in text(operator.get("/schedules/"))
    operator.post("/schedules/default/nightly/resume/")
    assert not nightly.require("nightly").paused
    assert operator.post("/schedules/save/", FORM).status_code == 403
    assert operator.post("/schedules/default/nightly/delete/",
                         {"confirm": "yes"}).status_code == 403
    assert nightly.get("nightly") is not None
    got = list(AuditEntry.objects.order_by("id").values_list("action", "refused"))
    assert got == [("schedule-run-now", False), ("schedule-pause", False),
                   ("schedule-resume", False), ("schedule-add", True),
                   ("schedule-remove", True)]


def test_a_viewer_may_not_act(viewer: Client, nightly: Schedules) -> None:
    assert viewer.post("/schedules/default/nightly/run-now/").status_code == 403
    assert nightly.runs("nightly") == []
    assert viewer.get("/schedules/default/nightly/run-now/").status_code == 405
    assert viewer.get("/schedules/default/nope/pause/").status_code == 405
    assert viewer.get("/schedules/default/nightly/explode/").status_code == 404


def test_the_page_says_when_each_was_created_and_keeps_the_removed_ones(
        admin: Client, nightly: Schedules) -> None:
    from core.mirror.schedules import mirror_schedules

    nightly.upsert(Schedule(name="poll", queue="default", every_s=600, handler="echo",
                            tasks=[{}]))
    page = text(admin.get("/schedules/"))
    created = [c.split("</span>")[0] for c in page.split("data-created>")[1:]]
    assert len(created) == 2 and all(c.startswith("created <time") and "just now" in c
                                     for c in created)
    assert "Removed schedules" not in page
    mirror_schedules(nightly.q)
    admin.post("/schedules/default/nightly/delete/", {"confirm": "yes"})  # by an admin
    nightly.remove("poll")  # as if Redis lost it
    mirror_schedules(nightly.q)
    page = text(admin.get("/schedules/"))
    assert "Removed schedules" in page
    assert 'data-removed="nightly"' in page and "At 02:30" in page
    nightly_row = page[page.index('data-removed="nightly"'):].split("</tr>")[0]
    assert "by ada" in nightly_row
    poll_row = page[page.index('data-removed="poll"'):].split("</tr>")[0]
    assert "lost from Redis" in poll_row and "Every 10m" in poll_row
    # The polled fragment leaves the history out.
    polled = text(admin.get("/schedules/", headers={"HX-Request": "true",
                                                     "HX-Target": "live"}))
    assert "Removed schedules" not in polled

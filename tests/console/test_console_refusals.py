"""What the console says when it refuses or cannot do what was asked (found by driving it as
each role, 2026-11-30): a 403 gives the refusal's own reason, not "may not see the console"
to an account that sees it; a form's address opened again is a page, not a blank 405; a
stale schedule delete is "nothing done", not a 404; the audit log filters every action it
records."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from core.queue import Queue
from core.queue.schedule.spec import Schedule
from core.queue.schedule.store import Schedules
from core.views.audit import ACTIONS

pytestmark = pytest.mark.django_db
CORE = Path(__file__).resolve().parents[2] / "core"


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


def test_a_403_says_what_the_account_lacks(viewer: Client, console: Queue) -> None:
    page = viewer.get("/alerts/")
    assert page.status_code == 403
    assert "the Alerts page is for admins (core.manage_alerts)." in text(page)
    forced = viewer.post("/limits/change/", {"queue": "default", "name": "x", "on": "queue",
                                             "concurrency": "2", "action": "set"})
    body = text(forced)
    assert forced.status_code == 403 and "needs the permission core.pause_queue" in body
    assert "may not see the console" not in body


def test_a_forms_address_opened_again_is_a_page_that_says_so(operator: Client,
                                                             console: Queue) -> None:
    for path in ("/actions/cancel/", "/limits/change/", "/tokens/create/"):
        r = operator.get(path)
        assert r.status_code == 405 and r["Allow"] == "POST", path
        assert "takes a form's submit" in text(r), path


def test_deleting_a_schedule_deleted_meanwhile_says_nothing_was_done(
    admin: Client, console: Queue
) -> None:
    Schedules(console).upsert(Schedule(name="tick", queue="default", handler="echo",
                                       tasks=[{}], every_s=120).validated())
    c = admin
    assert c.post("/schedules/default/tick/delete/", {"confirm": "yes"}).status_code == 302
    again = c.post("/schedules/default/tick/delete/", {"confirm": "yes"}, follow=True)
    assert again.status_code == 200
    assert "Nothing done: there is no schedule 'tick' in queue 'default' now" in text(again)


def test_the_filter_offers_every_action_the_code_records(viewer: Client, console: Queue) -> None:
    said = set()
    for path in CORE.rglob("*.py"):
        text = path.read_text()
        said |= set(re.findall(r"(?:audit\.record|check_permission|_act|require)\(\s*\w+,\s*"
                               r"\"([a-z][a-z-]+)\"", text))
        said |= set(re.findall(r"^[A-Z_]*(?:ACTION|SUBMIT|CLEAN|PREVIEW) = \"([a-z-]+)\"",
                               text, re.M))
    assert {"run-now", "schedule-run-now", "token-create", "alert-rule-add", "submit"} <= set(
        ACTIONS)
    assert said and said <= set(ACTIONS), said - set(ACTIONS)
    assert viewer.get("/audit/?action=run-now").status_code == 200
    assert viewer.get("/audit/?action=nonsense").status_code == 400

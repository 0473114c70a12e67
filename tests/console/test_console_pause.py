"""Pausing a queue asks first (issue 33, 12): the overview's Pause is a link whose GET shows
what a pause stops (the tasks that stay waiting, the running ones that finish, the schedules
that fire into the paused queue) and changes nothing; only the confirmation's POST pauses.
The data jobs' submit form says when its queue is paused, and so does its result."""

from __future__ import annotations

import html as htmllib
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from django.test import Client

from core.models import AuditEntry
from core.queue.schedule.api import declare, every
from tests.console_support import World, field

pytestmark = pytest.mark.django_db


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def pause_link(html: str) -> str:
    m = re.search(r'<a class="btn small" data-pause href="([^"]+)"', html)
    assert m, "no Pause link on the overview"
    return htmllib.unescape(m.group(1))


def test_the_overviews_pause_asks_first_with_what_it_stops(admin: Client, world: World) -> None:
    declare(world.q, every("nightly", "1d", handler="echo", tasks=[{}]),
            every("hourly", "1h", handler="echo", tasks=[{}]))
    world.q.submit([1], handler="echo", delay=600)  # a delayed request
    link = pause_link(admin.get("/").content.decode())
    assert link.startswith("/actions/pause/?queue=default&next=/")

    ask = admin.get(link)
    assert ask.status_code == 200
    body = text(ask)
    assert "Pause queue default?" in body
    assert "2 waiting tasks stay waiting" in body  # run-1's, not leased
    assert "2 running tasks finish on their workers" in body
    assert "1 delayed request come due into the paused queue" in body
    assert re.search(r"Schedule hourly still fires into the paused queue \(next at "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d \w+\): its runs wait", body)
    assert "Schedule nightly still fires" in body
    assert not world.q.paused()  # a GET changes nothing
    assert not AuditEntry.objects.filter(action="pause").exists()

    html = ask.content.decode()
    done = admin.post("/actions/pause/", {
        "queue": field(html, "queue"), "nonce": field(html, "nonce"),
        "next": field(html, "next"), "confirmed": field(html, "confirmed")}, follow=True)
    assert done.redirect_chain[-1][0] == "/"
    assert "queue default paused" in text(done)
    assert world.q.paused()
    entry = AuditEntry.objects.get(action="pause")
    assert (entry.actor, entry.acted) == ("ada", 1)


def test_a_post_without_confirmed_asks_too(admin: Client, world: World) -> None:
    html = admin.get("/requests/").content.decode()
    ask = admin.post("/actions/pause/", {"queue": "default", "nonce": field(html, "nonce")})
    assert ask.status_code == 200 and "Pause queue default?" in text(ask)
    assert not world.q.paused()


def test_the_question_of_a_paused_queue_says_it_is_paused_already(admin: Client,
                                                                  world: World) -> None:
    world.q.pause("someone")
    body = text(admin.get("/actions/pause/?queue=default"))
    assert "Queue default is paused already: pausing it again changes nothing" in body


def test_no_pause_question_for_who_may_not_pause(operator: Client, world: World) -> None:
    response = operator.get("/actions/pause/?queue=default")
    assert response.status_code == 403
    assert not world.q.paused() and not AuditEntry.objects.exists()  # a GET tried nothing


@pytest.mark.parametrize("path", ["/actions/pause/?queue=nosuch", "/actions/pause/?queue=%00",
                                  "/actions/pause/?queue=default&next=https://evil.example/"])
def test_a_pause_question_with_junk_is_not_an_error(admin: Client, world: World,
                                                    path: str) -> None:
    response = admin.get(path)
    assert response.status_code in (200, 404), response.status_code
    assert "evil.example" not in response.content.decode()


def test_other_actions_still_answer_get_with_405(admin: Client, world: World) -> None:
    assert admin.get("/actions/requeue/?queue=default").status_code == 405
    assert admin.get("/actions/cancel/?queue=default").status_code == 405


def test_the_data_jobs_form_warns_when_its_queue_is_paused(admin: Client, world: World,
                                                          tmp_path: Path) -> None:
    assert 'id="paused-warning"' not in admin.get("/jobs/").content.decode()
    world.q.pause("ada")
    page = text(admin.get("/jobs/"))
    assert "Queue default is paused: a job submitted now is queued" in page
    data = tmp_path / "in.parquet"
    pd.DataFrame({"carrier": ["AA"]}).to_parquet(data, index=False)
    form = {"input": str(data), "format": "parquet", "sql": "SELECT * FROM chunk",
            "output": str(tmp_path / "o"), "output_format": "parquet"}
    done = admin.post("/jobs/submit/?queue=default", form, follow=True)
    assert "Queue default is paused: this job waits until it is resumed" in text(done)

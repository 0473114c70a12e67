"""`manage.py schedule` (issue 19, item 5): add with the same validation as the console,
list, show, pause, resume, run-now, remove; each change audited with its actor."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from core.models import AuditEntry
from core.queue import Queue, handlers
from core.queue.schedule.store import Schedules

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("schedule", *args, stdout=out)
    return out.getvalue()


def test_add_list_show_pause_resume_run_now_remove(django_queue: Queue) -> None:
    out = run("add", "nightly", "--cron", "30 2 * * *", "--tz", "Europe/Berlin",
              "--handler", "agg", '{"day": "yesterday"}', "--priority", "70")
    assert "created schedule nightly in queue default: At 02:30 (Europe/Berlin)" in out
    assert out.count("T02:30") == 5
    # No worker runs agg: allowed (workers may come later), and said.
    assert "warning: no worker of queue default runs handler 'agg' now" in out
    s = Schedules(django_queue).require("nightly").schedule
    assert (s.tasks, s.options, s.missed, s.overlap) == (
        [{"day": "yesterday"}], {"priority": 70}, "latest", "skip")
    run("add", "poll", "--every", "10m", "--handler", "poll", "{}", "--overlap", "allow")
    listing = run("list")
    assert "nightly" in listing and "poll" in listing and "Every 10m" in listing
    assert "paused schedule nightly" in run("pause", "nightly")
    assert "was paused already" in run("pause", "nightly")
    assert "PAUSED" in run("show", "nightly")
    assert "resumed schedule nightly" in run("resume", "nightly")
    rid = run("run-now", "nightly").strip()
    assert rid.startswith("sched.nightly.now") and django_queue.state(rid) == "active"
    assert f"request {rid} active" in run("show", "nightly")
    assert "removed schedule poll" in run("remove", "poll")
    handlers.announce(django_queue, "w-1", ["poll"])
    assert "warning" not in run("add", "poll2", "--every", "10m", "--handler", "poll", "{}")
    run("remove", "poll2")
    actions = list(AuditEntry.objects.order_by("id").values_list("action", "actor"))
    assert [a for a, _ in actions] == ["schedule-add", "schedule-add", "schedule-pause",
                                       "schedule-pause", "schedule-resume",
                                       "schedule-run-now", "schedule-remove", "schedule-add",
                                       "schedule-remove"]
    assert all(actor.startswith("os:") for _, actor in actions)


@pytest.mark.parametrize(("args", "says"), [
    (["--cron", "30 2 * *"], "bad cron expression '30 2 * *'"),
    (["--cron", "30 2 * * *", "--tz", "Europe/Paris2"], "unknown time zone 'Europe/Paris2'"),
    (["--every", "10 minutes"], "bad interval '10 minutes'"),
    (["--every", "1h", "--start", "2026-12-02T00:00", "--end", "2026-12-01T00:00"],
     "is not after the start"),
    (["--every", "1h", "--missed", "all"], "use overlap=allow"),
])
def test_a_bad_schedule_is_refused_with_what_is_wrong(django_queue: Queue, args: list[str],
                                                      says: str) -> None:
    with pytest.raises(CommandError) as err:
        run("add", "bad", *args, "--handler", "h", "{}")
    assert says in str(err.value)
    assert Schedules(django_queue).names() == []


def test_adding_a_name_twice_is_refused_unless_update(django_queue: Queue) -> None:
    run("add", "x", "--every", "1h", "--handler", "h", "{}")
    with pytest.raises(CommandError, match="already exists"):
        run("add", "x", "--every", "2h", "--handler", "h", "{}")
    assert "updated schedule x" in run("add", "x", "--every", "2h", "--handler", "h", "{}",
                                       "--update")

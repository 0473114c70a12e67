"""A data job schedule is checked as `datajob submit` checks a job (issue 33, items 4 and 5):
when it is saved, in the console and at the command line, on the job of its next slot (paths
under the data roots and as Spark reads them, its SQL, its options), and again at each run,
before anything is queued: a run that would be refused is recorded as the schedule's error, and
leaves no request and no dead letter. And the schedules' own input (item 7): a six-field cron
expression, a version that is no number, a refusal to an account with no role."""

from __future__ import annotations

import html as htmllib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from core.models import AuditEntry
from core.ops.datajobs import submit_slot
from core.pipeline import jobs
from core.queue import Queue, read
from core.queue.schedule import fire
from core.queue.schedule.spec import InvalidSchedule, Schedule
from core.queue.schedule.store import CannotSubmitJob, Schedules
from tests.conftest import keys_under
from tests.console_support import logged_in_client

pytestmark = pytest.mark.django_db
ROOTS = "(QA_DATA_ROOTS or QA_OUTPUT_ROOTS)"


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A CSV input under the run's data roots (tests/conftest.py data_roots), and an output
    folder beside it."""
    (tmp_path / "in.csv").write_text("a,b\n1,2\n3,4\n")
    (tmp_path / "out").mkdir()
    return tmp_path


def job(data: Path, **kw: Any) -> dict[str, Any]:
    return {"input": str(data / "in.csv"), "format": "csv", "sql": "SELECT a, b FROM chunk",
            "output": str(data / "out" / "{slot}"), **kw}


def form(job: dict[str, Any], **kw: str) -> dict[str, str]:
    return {"name": "nightly", "kind": "datajob", "job": json.dumps(job), "timing": "cron",
            "cron": "0 3 * * *", "tz": "Europe/Berlin", "missed": "latest",
            "missed_max": "100", "overlap": "skip", **kw}


def text(response: Any) -> str:
    return htmllib.unescape(response.content.decode())


def add(*args: str) -> str:
    out = io.StringIO()
    call_command("schedule", "add", "nightly", "--cron", "0 3 * * *", *args, stdout=out)
    return out.getvalue()


# What `datajob submit` refuses, a schedule's save refuses with the same words.
REFUSED = {
    "input outside the roots": ({"input": "/etc/passwd"},
                                "input '/etc/passwd' is not under a data root: "),
    "output outside the roots": ({"output": "/srv/elsewhere/{slot}"},
                                 "--output '/srv/elsewhere/"),
    "output through glob alternatives": (
        {"output": "{tmp}/out/.{{./,x/}}./x/{slot}"},
        "--output '{tmp}/out/.{./,x/}./x/"),
    "view through glob alternatives": (
        {"views": {"p": "{tmp}/.{./,x/}./in.csv"}},
        "--view p '{tmp}/.{./,x/}./in.csv' holds '{', which Spark reads as a pattern"),
    "input with a wildcard in a folder": ({"input": "{tmp}/*/in.csv"},
                                          "a wildcard (* or ?) may stand in the path's last"),
    "sql": ({"sql": "SELECT reflect('java.lang.System', 'getenv') AS e FROM chunk"},
            "--sql calls reflect(), which a job's SQL may not use"),
    "a column the input lacks": ({"sql": "SELECT nope FROM chunk"},
                                 "--sql names `nope`, which the data does not have"),
    "an output the same for every run": (
        {"output": "{tmp}/out/fixed"},
        "the data job's output '{tmp}/out/fixed' is the same for every run"),
}
refusals = pytest.mark.parametrize("change", REFUSED.values(), ids=REFUSED.keys())


def filled(data: Path, change: dict[str, Any], says: str) -> tuple[dict[str, Any], str]:
    def fill(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: fill(x) for k, x in v.items()}
        return v.replace("{tmp}", str(data)) if isinstance(v, str) else v

    return job(data, **fill(change)), says.replace("{tmp}", str(data))


@refusals
def test_the_console_refuses_to_save_a_data_job_that_submit_would_refuse(
        change: tuple[dict[str, Any], str], data: Path, console: Queue) -> None:
    spec, says = filled(data, *change)
    r = logged_in_client("ada", "admin").post("/schedules/save/", form(spec))
    assert r.status_code == 400
    assert says in text(r), text(r)[-3000:]
    assert Schedules(console).names() == []
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.acted) == ("schedule-add", 0) and says in entry.error


@refusals
def test_schedule_add_refuses_a_data_job_that_submit_would_refuse(
        change: tuple[dict[str, Any], str], data: Path, django_queue: Queue) -> None:
    spec, says = filled(data, *change)
    with pytest.raises(CommandError) as refused:
        add("--job", json.dumps(spec))
    assert str(refused.value).startswith("schedule add: ") and says in str(refused.value)
    assert Schedules(django_queue).names() == []


def test_a_data_job_with_a_field_no_job_has_is_refused_when_saved(
        data: Path, console: Queue) -> None:
    """Checked with the job's other fields (core.pipeline.submission.scheduled_job: the engine
    knows no data job's fields), in the console and at the command line."""
    spec = job(data, colour="red")
    r = logged_in_client("ada", "admin").post("/schedules/save/", form(spec))
    assert r.status_code == 400
    assert "bad data job spec: " in text(r) and "colour" in text(r)
    with pytest.raises(CommandError) as refused:
        add("--job", json.dumps(spec))
    assert str(refused.value).startswith("schedule add: bad data job spec: ")
    assert Schedules(console).names() == []


@pytest.mark.parametrize("views", ["planes", ["planes"]])
def test_views_that_are_no_object_of_names_are_refused_not_a_500(
        views: Any, data: Path, console: Queue) -> None:
    spec = job(data, views=views)
    r = logged_in_client("ada", "admin").post("/schedules/save/", form(spec))
    assert r.status_code == 400, text(r)[-2000:]
    assert "bad data job spec: " in text(r)
    with pytest.raises(CommandError) as refused:
        add("--job", json.dumps(spec))
    assert str(refused.value).startswith("schedule add: bad data job spec: ")
    assert Schedules(console).names() == []


def test_a_data_job_schedule_takes_the_options_of_datajob_submit(
        data: Path, django_queue: Queue) -> None:
    from core.cli.schedule import add as cli_add

    with pytest.raises(CommandError, match="--priority must be between 0 and 99, got 500"):
        add("--job", json.dumps(job(data)), "--priority", "500")
    with pytest.raises(CommandError, match=r"takes the options priority, concurrency, tenant, "
                                           r"max_attempts; not lease_ms"):
        cli_add(Schedule(name="x", queue="default", cron="0 3 * * *", job=job(data),
                         options={"lease_ms": 5000}).validated(), out=io.StringIO())
    assert Schedules(django_queue).names() == []


def test_a_saved_data_job_has_absolute_paths_and_a_templated_input_may_come_later(
        data: Path, django_queue: Queue, monkeypatch: pytest.MonkeyPatch) -> None:
    """Relative paths are read from where the schedule is saved, as `datajob submit` reads
    them, and stored absolute (the scheduler runs elsewhere); an input templated with the slot
    need not exist when the schedule is saved."""
    monkeypatch.chdir(data)
    out = add("--job", json.dumps(job(data, input="in.csv", output="out/{date}")))
    assert "created schedule nightly" in out
    saved = Schedules(django_queue).require("nightly").schedule.job
    assert saved is not None
    assert (saved["input"], saved["output"]) == (str(data / "in.csv"), str(data / "out/{date}"))
    add("--update", "--job", json.dumps(job(data, input="in-{date}.csv", output="out/{date}")))
    with pytest.raises(CommandError, match=r"input '.*/gone\.csv' does not exist"):
        add("--update", "--job", json.dumps(job(data, input="gone.csv", output="out/{date}")))


# -- each run is checked again, before anything is queued --------------------------------------


def due(store: Schedules, name: str) -> int:
    state = store.require(name)
    assert state.next_ms is not None
    return state.next_ms + 1000


@pytest.mark.parametrize(("change", "says"), [
    ({"input": "/etc/passwd"}, "input '/etc/passwd' is not under a data root"),
    ({"views": {"p": "{tmp}/.{./,x/}./in.csv"}}, "holds '{', which Spark reads as a pattern"),
    ({"output": "/srv/elsewhere/{slot}"}, "is not inside an output root"),
])
def test_a_run_of_a_schedule_stored_unchecked_is_refused_and_queues_nothing(
        change: dict[str, Any], says: str, data: Path, django_queue: Queue) -> None:
    """A schedule written into Redis without the save's check (by an older version, or by
    hand): the scheduler checks each run as `datajob submit` would, records the refusal in
    the schedule's runs, and queues nothing, so no dead letter either."""
    spec, _ = filled(data, change, "")
    store = Schedules(django_queue, submit_job=submit_slot)
    store.upsert(Schedule(name="forged", queue=django_queue.name, every_s=60, job=spec))
    before = set(keys_under(django_queue.redis, django_queue.keys.prefix))
    report = fire.tick(store, due(store, "forged"))
    assert (report.fired, report.errors) == (0, 1)
    runs = store.runs("forged")
    assert [r.status for r in runs] == ["error", "fired"], runs  # newest first
    assert says in runs[0].note, runs[0].note
    assert read.dead_letters(django_queue) == []
    new = set(keys_under(django_queue.redis, django_queue.keys.prefix)) - before
    assert not [k for k in new if ":req:" in k], new  # no request was made


def test_a_run_whose_templated_input_is_missing_is_an_error_and_the_next_runs(
        data: Path, django_queue: Queue) -> None:
    store = Schedules(django_queue, submit_job=submit_slot)
    store.upsert(Schedule(name="daily", queue=django_queue.name, every_s=60,
                          job=job(data, input=str(data / "in-{slot}.csv"))))
    first = due(store, "daily")
    assert fire.tick(store, first).errors == 1
    runs = store.runs("daily")
    assert [r.status for r in runs] == ["error", "fired"], runs
    assert "in-" in runs[0].note and "does not exist" in runs[0].note
    nxt = due(store, "daily")
    (data / f"in-{(nxt - 1000) // 1000}.csv").write_text("a,b\n5,6\n")
    report = fire.tick(store, nxt)
    assert report.fired == 1, store.runs("daily")
    [rid] = report.fired_ids
    spec = json.loads(jobs.records(django_queue).get(rid, "spec") or "{}")
    assert spec["input"] == str(data / f"in-{(nxt - 1000) // 1000}.csv")
    assert spec["format"] == "csv" and spec["output"] == str(data / "out" /
                                                             str((nxt - 1000) // 1000))


def test_the_commands_schedulers_and_a_run_now_submit_data_jobs(
        data: Path, django_queue: Queue, wait_until: Any) -> None:
    """The engine imports no data pipeline: `runscheduler` (as `runservices`) hands its
    scheduler core.ops.datajobs.submit_slot, and a run now from the command line submits
    through it too; each run is the job of its slot."""
    store = Schedules(django_queue)
    store.upsert(Schedule(name="each", queue=django_queue.name, every_s=1, overlap="allow",
                          job=job(data)))
    out = io.StringIO()
    call_command("schedule", "run-now", "each", stdout=out)
    rid = out.getvalue().strip()
    assert jobs.status(django_queue, rid).state == "running"
    slot = store.require("each").next_ms
    assert slot is not None
    wait_until(lambda: django_queue.now_ms() >= slot, timeout=5)
    out = io.StringIO()
    call_command("runscheduler", "--burst", "--queue", django_queue.name, stdout=out)
    assert "fired 1 slots" in out.getvalue() and " 0 errors" in out.getvalue(), out.getvalue()
    [run] = [r for r in store.runs("each") if r.status == "fired"]
    assert run.request_id is not None
    spec = jobs.status(django_queue, run.request_id).spec
    assert spec is not None and spec.output == str(data / "out" / str(run.slot_ms // 1000))


def test_a_store_given_no_job_submitter_refuses_a_data_jobs_run_now(
        data: Path, django_queue: Queue) -> None:
    store = Schedules(django_queue)
    store.upsert(Schedule(name="each", queue=django_queue.name, every_s=60, job=job(data)))
    with pytest.raises(CannotSubmitJob, match="runs a data job, and this scheduler was given "
                                              "no way to submit one"):
        store.run_now("each")
    assert jobs.records(django_queue).indexed(0, -1) == []


def test_a_scheduler_that_cannot_submit_data_jobs_leaves_their_slots_to_one_that_can(
        data: Path, django_queue: Queue) -> None:
    """Any number of schedulers may run: one given no job submitter (the engine's alone, in a
    producer's process) claims no data job's slot, which stays due until one of Django's
    (runservices, runscheduler) fires it; a schedule of tasks it fires as ever."""
    plain = Schedules(django_queue)
    plain.upsert(Schedule(name="job", queue=django_queue.name, every_s=60, job=job(data)))
    plain.upsert(Schedule(name="tasks", queue=django_queue.name, every_s=60, handler="h",
                          tasks=[{}]))
    now = due(plain, "job")
    report = fire.tick(plain, now)
    assert (report.fired, report.errors, report.fired_ids) == (1, 0, ["sched.tasks." + str(
        (now - 1000) // 1000)])
    left = plain.require("job")
    assert left.next_ms == now - 1000 and left.pending is None and plain.runs("job") == []
    report = fire.tick(Schedules(django_queue, submit_job=submit_slot), now)
    assert (report.fired, report.errors) == (1, 0)
    assert [r.status for r in plain.runs("job")] == ["fired"]


# -- the schedules' own input (issue 33, item 7) -----------------------------------------------


def test_a_six_field_cron_expression_is_refused_with_the_docs_message(
        django_queue: Queue) -> None:
    says = ("bad cron expression '0 0 * * * *': it has 6 fields; a cron expression has five "
            "fields: minute hour day-of-month month day-of-week, such as '30 2 * * *' (no "
            "seconds field)")
    docs = (Path(__file__).resolve().parents[2] / "docs" / "scheduling.md").read_text()
    assert says in " ".join(docs.split())
    with pytest.raises(InvalidSchedule) as refused:
        Schedule(name="s", cron="0 0 * * * *", handler="h", tasks=[{}]).validated()
    assert str(refused.value) == says
    with pytest.raises(CommandError, match=r"it has 6 fields"):
        call_command("schedule", "add", "s", "--cron", "0 0 * * * *", "--handler", "h", "{}")
    r = logged_in_client("ada", "admin").post("/schedules/save/", {
        "name": "s", "kind": "tasks", "handler": "h", "tasks": "{}", "timing": "cron",
        "cron": "0 0 * * * *", "tz": "UTC"})
    assert r.status_code == 400 and says in text(r)
    assert Schedules(django_queue).names() == []


@pytest.mark.parametrize("version", ["²", "\uff11", "9" * 5000, "-1", "1.0"])
def test_a_version_that_is_no_number_is_a_400_not_a_500(version: str, console: Queue) -> None:
    store = Schedules(console)
    store.upsert(Schedule(name="s", queue=console.name, cron="0 3 * * *", handler="h",
                          tasks=[{}]))
    r = logged_in_client("ada", "admin").post("/schedules/save/", {
        "name": "s", "kind": "tasks", "handler": "h", "tasks": "{}", "timing": "cron",
        "cron": "0 4 * * *", "tz": "UTC", "original": "s", "version": version})
    assert r.status_code == 400
    assert "is not the whole number the edit form sends" in text(r)
    assert store.require("s").schedule.cron == "0 3 * * *"


def test_every_schedule_action_refused_to_an_account_with_no_role_is_audited(
        console: Queue) -> None:
    store = Schedules(console)
    store.upsert(Schedule(name="s", queue=console.name, cron="0 3 * * *", handler="h",
                          tasks=[{}]))
    nobody: Client = logged_in_client("nora", None)
    assert nobody.post("/schedules/save/", {"name": "t", "cron": "junk"}).status_code == 403
    assert nobody.post("/schedules/save/", {"name": "s", "original": "s",
                                            "version": "²"}).status_code == 403
    for action in ("run-now", "pause", "resume", "delete"):
        assert nobody.post(f"/schedules/default/s/{action}/",
                           {"confirm": "yes"}).status_code == 403
    assert nobody.post("/schedules/default/nope/pause/").status_code == 403
    got = list(AuditEntry.objects.order_by("id").values_list("action", "actor", "target",
                                                             "refused"))
    assert got == [("schedule-add", "nora", "schedule t", True),
                   ("schedule-edit", "nora", "schedule s", True),
                   ("schedule-run-now", "nora", "schedule s", True),
                   ("schedule-pause", "nora", "schedule s", True),
                   ("schedule-resume", "nora", "schedule s", True),
                   ("schedule-remove", "nora", "schedule s", True),
                   ("schedule-pause", "nora", "schedule nope", True)]
    assert store.runs("s") == [] and not store.require("s").paused

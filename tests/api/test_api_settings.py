"""The API's settings and the rest of the data jobs' and schedules' operations, each over the
service the console and the CLI use: limits, retention, alert rules, a schedule's edit, the
data jobs' list (the database's, paged) and a job's page once Redis forgot it, and the clean
of staging data."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.models import AuditEntry, RetentionSetting
from core.models.datajobs import DataJob
from core.ops import alerts
from core.queue import Queue, read
from tests.api_support import Caller
from tests.ops_support import CLI

pytestmark = pytest.mark.django_db


def test_limits_are_set_shown_and_removed_by_admins_only(
    console: Queue, api_admin: Caller, api_operator: Caller, api_reader: Caller
) -> None:
    body = {"on": "handler=echo", "rate": "5/1s", "concurrency": 2}
    assert api_operator.put("/queues/default/limits/echo-cap", body).status_code == 403
    r = api_admin.put("/queues/default/limits/echo-cap", body)
    assert r.status_code == 200 and r.json()["acted"] == 1, r.content
    assert "set" in r.json()["message"]
    (use,) = [u for u in read.limits(console) if u.limit.name == "echo-cap"]
    assert (use.limit.on, use.limit.value, use.limit.rate, use.limit.concurrency) == (
        "handler", "echo", 5, 2)
    shown = api_reader.get("/queues/default/limits").json()
    assert [(x["name"], x["rate"], x["per_ms"], x["concurrency"], x["held"]) for x in shown] == [
        ("echo-cap", 5, 1000, 2, 0)]
    bad = api_admin.put("/queues/default/limits/x", {"on": "planet=mars", "rate": "1/s"})
    assert bad.status_code == 400 and "a limit is on" in bad.json()["message"]
    none = api_admin.put("/queues/default/limits/x", {"on": "queue"})
    assert none.status_code == 400 and "give a rate" in none.json()["message"]
    assert api_operator.delete("/queues/default/limits/echo-cap").status_code == 403
    r = api_admin.delete("/queues/default/limits/echo-cap")
    assert r.status_code == 200 and r.json()["acted"] == 1, r.content
    assert read.limits(console) == []
    assert AuditEntry.objects.filter(action="limit-set", actor__startswith="token:").exists()


def test_retention_is_shown_set_per_queue_and_unset(
    console: Queue, api_admin: Caller, api_operator: Caller, api_reader: Caller
) -> None:
    kinds = {k["kind"]: k for k in api_reader.get("/retention").json()["kinds"]}
    assert kinds["requests"]["source"] == "default" and kinds["audit"]["seconds"] > 0
    assert api_operator.put("/retention/requests", {"duration": "2d"}).status_code == 403
    r = api_admin.put("/retention/requests", {"duration": "2d", "queue": "default"})
    assert r.status_code == 200, r.content
    row = RetentionSetting.objects.get(kind="requests", queue="default")
    assert row.seconds == 2 * 86_400
    kinds = {k["kind"]: k for k in api_reader.get("/retention").json()["kinds"]}
    assert kinds["requests"]["queues"]["default"]["seconds"] == 2 * 86_400
    assert api_admin.put("/retention/requests", {"duration": "soon"}).status_code == 400
    assert api_admin.put("/retention/everything", {"duration": "1d"}).status_code == 400
    r = api_admin.delete("/retention/requests", queue="default")
    assert r.status_code == 200, r.content
    assert not RetentionSetting.objects.filter(kind="requests", queue="default").exists()


def test_alert_rules_are_added_listed_turned_off_and_removed(
    console: Queue, api_admin: Caller, api_operator: Caller, api_reader: Caller
) -> None:
    alerts.add_channel(CLI, "oncall", email="oncall@example.com")
    rule = {"name": "billing-fails", "when": "new-fingerprint", "channels": ["oncall"],
            "queue": "default", "handler": "billing"}
    assert api_operator.post("/alerts/rules", rule).status_code == 403
    r = api_admin.post("/alerts/rules", rule)
    assert r.status_code == 201 and r.json() == {"name": "billing-fails", "enabled": True}
    listed = api_reader.get("/alerts").json()
    assert [c["name"] for c in listed["channels"]] == ["oncall"]
    (got,) = listed["rules"]  # before the second
    assert (got["when"], got["handler"], got["channels"]) == ("new-fingerprint", "billing",
                                                               ["oncall"])
    bad = api_admin.post("/alerts/rules", rule | {"name": "b2", "channels": ["nowhere"]})
    assert bad.status_code == 400 and "nowhere" in bad.json()["message"]
    stuck = {"name": "stuck", "when": "no-live-worker", "channels": ["oncall"],
             "queue": "default", "for": "1m"}
    assert api_admin.post("/alerts/rules", stuck).status_code == 201
    assert {r["name"]: r["for_s"] for r in api_reader.get("/alerts").json()["rules"]} == {
        "billing-fails": 0, "stuck": 60}
    assert api_admin.post("/alerts/rules/billing-fails/disable").json() == {"changed": True}
    assert {r["name"]: r["enabled"] for r in api_reader.get("/alerts").json()["rules"]} == {
        "billing-fails": False, "stuck": True}
    assert api_admin.post("/alerts/rules/billing-fails/disable").json() == {"changed": False}
    assert api_admin.post("/alerts/rules/billing-fails/remove").json() == {"removed": True}
    assert api_admin.post("/alerts/rules/billing-fails/enable").status_code == 404


def test_a_schedule_is_edited_at_the_version_read(
    console: Queue, api_admin: Caller, api_operator: Caller
) -> None:
    body = {"name": "nightly", "handler": "echo", "tasks": [{"n": 1}], "cron": "0 3 * * *"}
    version = api_admin.post("/queues/default/schedules", body).json()["version"]
    edit = body | {"cron": "30 4 * * *", "version": version}
    assert api_operator.put("/queues/default/schedules/nightly", edit).status_code == 403
    r = api_admin.put("/queues/default/schedules/nightly", edit)
    assert r.status_code == 200 and r.json()["status"] == "updated", r.content
    (s,) = api_admin.get("/queues/default/schedules").json()
    assert s["cron"] == "30 4 * * *" and s["version"] == r.json()["version"]
    stale = api_admin.put("/queues/default/schedules/nightly", edit | {"cron": "0 5 * * *"})
    assert stale.status_code == 409 and "changed meanwhile" in stale.json()["message"]
    renamed = api_admin.put("/queues/default/schedules/nightly", edit | {"name": "daily"})
    assert renamed.status_code == 400 and "keeps its name" in renamed.json()["message"]
    gone = api_admin.put("/queues/default/schedules/weekly", edit | {"name": "weekly"})
    assert gone.status_code == 404 and "no schedule" in gone.json()["message"]


def _jobs(n: int) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    spec = json.dumps({"job_id": "x", "input": "var/sample/x.parquet", "format": "parquet",
                       "output": "var/out/x", "sql": "SELECT * FROM chunk"})
    DataJob.objects.bulk_create(
        DataJob(queue="default", job_id=f"j{i:03d}", state="done", spec=spec, chunks=2,
                chunks_done=2, split_how="rows", input_rows=10,
                created_at=start + timedelta(seconds=i // 2),
                finished_at=start + timedelta(seconds=i // 2 + 1), updated_at=start)
        for i in range(n))


def test_data_jobs_are_listed_from_the_database_and_read_after_redis_forgot_them(
    console: Queue, api_reader: Caller, api_operator: Caller
) -> None:
    _jobs(7)
    seen: list[str] = []
    params: dict[str, Any] = {"count": 3}
    while True:
        got = api_reader.get("/queues/default/datajobs", **params).json()
        assert len(got["jobs"]) <= 3
        seen += [j["job_id"] for j in got["jobs"]]
        if got["next"] is None:
            break
        params["after"] = got["next"]
    assert seen == [f"j{i:03d}" for i in reversed(range(7))]
    assert api_reader.get("/queues/default/datajobs", after="x:1").status_code == 400
    job = api_reader.get("/queues/default/datajobs/j003").json()
    assert (job["source"], job["state"], job["split_how"], job["input_rows"]) == (
        "database", "done", "rows", 10)
    assert api_reader.get("/queues/default/datajobs/j999").status_code == 404
    assert api_reader.post("/queues/default/staging/clean", {"dry_run": True}
                           ).status_code == 403
    r = api_operator.post("/queues/default/staging/clean", {"dry_run": True})
    assert r.status_code == 200 and r.json()["dry_run"] is True and r.json()["removed"] == []
    assert AuditEntry.objects.filter(action="datajob-clean").exists()

"""The API's other endpoints, each over its core/ops service: a data job's submit (the same
checks as `datajob submit`), bulk preview → confirm by snapshot → progress, pause and resume,
claim and release of a leased task, schedules, workers, search and the audit log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.models import AuditEntry, BulkAction
from core.ops import runner
from core.queue import Queue, read
from tests.api_support import Caller
from tests.console_support import World

pytestmark = pytest.mark.django_db


def test_a_data_job_is_submitted_with_the_clis_checks(
    console: Queue, api_operator: Caller, api_reader: Caller, tmp_path: Path
) -> None:
    data = tmp_path / "in.csv"
    data.write_text("a,b\n1,2\n3,4\n")
    body = {"input": str(data), "output": str(tmp_path / "out"),
            "sql": "SELECT a, b FROM chunk", "request_id": "job-1"}
    assert api_reader.post("/queues/default/datajobs", body).status_code == 403
    r = api_operator.post("/queues/default/datajobs", body)
    assert r.status_code == 201, r.content
    assert r.json()["job_id"] == "job-1" and r.json()["created"] is True
    assert read.request(console, "job-1") is not None
    bad = api_operator.post("/queues/default/datajobs", body | {"sql": "SELECT nope FROM chunk",
                                                                "request_id": "job-2"})
    assert bad.status_code == 400 and "nope" in bad.json()["message"]
    outside = api_operator.post("/queues/default/datajobs", body | {"input": "/etc/passwd",
                                                                    "request_id": "job-3"})
    assert outside.status_code == 400
    job = api_reader.get("/queues/default/datajobs/job-1").json()
    assert job["state"] == "running" and job["spec"]["sql"].upper().startswith("SELECT")
    assert api_reader.get("/queues/default/datajobs/job-9").status_code == 404
    assert api_reader.post("/queues/default/datajobs/job-1/cancel").status_code == 403
    r = api_operator.post("/queues/default/datajobs/job-1/cancel")
    assert r.status_code == 200 and r.json()["acted"] >= 1, r.content
    assert api_reader.get("/queues/default/datajobs/job-1").json()["state"] == "cancelled"


def test_bulk_requeue_previews_a_snapshot_then_runs_it_once_confirmed(
    world: World, api_operator: Caller
) -> None:
    r = api_operator.post("/queues/default/bulk", {"action": "requeue",
                                                   "filters": {"request": world.failed}})
    assert r.status_code == 201, r.content
    preview = r.json()
    assert preview["count"] == 3 and preview["status"] == "previewed"
    assert read.stats(world.q).dead == 3  # nothing done yet
    r = api_operator.post(f"/bulk/{preview['id']}/confirm", {})
    assert r.status_code == 200 and r.json()["status"] == "running"
    state = runner.RunnerState()
    while runner.run_once(state, {}):
        pass
    done = api_operator.get(f"/bulk/{preview['id']}").json()
    assert done["status"] == "done" and done["acted"] == 3
    assert BulkAction.objects.get(pk=preview["id"]).actor_name == f"token:{api_operator.name}"
    bad = api_operator.post("/queues/default/bulk", {"action": "requeue",
                                                     "filters": {"colour": "red"}})
    assert bad.status_code == 400 and "unknown filter" in bad.json()["message"]


def test_pause_and_resume_need_an_admin(console: Queue, api_admin: Caller,
                                        api_operator: Caller) -> None:
    assert api_operator.post("/queues/default/pause").status_code == 403
    r = api_admin.post("/queues/default/pause")
    assert r.status_code == 200 and console.paused()
    assert api_admin.get("/queues/default").json()["paused"] is True
    assert api_admin.post("/queues/default/resume").status_code == 200 and not console.paused()


def test_release_a_leased_task_as_seen_and_a_stale_view_is_skipped(
    world: World, api_operator: Caller
) -> None:
    tasks = api_operator.get(f"/queues/default/requests/{world.running}/tasks").json()["tasks"]
    live = next(t for t in tasks if t["task_id"] == world.live_task)
    entry = {"request_id": world.running, "task_id": live["task_id"], "consumer": "w-other",
             "idle_ms": 0}
    r = api_operator.post("/queues/default/pending/release", {"entries": [entry]})
    assert r.json()["acted"] == 0 and r.json()["skipped"] == 1  # not that holder
    entry["consumer"] = live["consumer"]
    r = api_operator.post("/queues/default/pending/release", {"entries": [entry]})
    assert r.status_code == 200 and r.json()["acted"] == 1, r.content


def test_reclaim_refuses_a_live_worker_and_takes_back_a_stale_ones_leases(
    world: World, api_operator: Caller
) -> None:
    r = api_operator.post("/queues/default/workers/w-live/reclaim")
    assert r.status_code == 409 and "beat within" in r.json()["message"]
    world.q.redis.zadd(world.q.keys.workers, {"w-stale": world.q.now_ms() - 60_000})
    r = api_operator.post("/queues/default/workers/w-stale/reclaim")
    assert r.status_code == 200 and r.json()["acted"] == 1, r.content


def test_schedules_workers_search_and_the_audit_log(
    console: Queue, api_admin: Caller, api_operator: Caller, api_reader: Caller
) -> None:
    body = {"name": "nightly", "handler": "echo", "tasks": [{"n": 1}], "cron": "0 3 * * *"}
    assert api_operator.post("/queues/default/schedules", body).status_code == 403
    r = api_admin.post("/queues/default/schedules", body)
    assert r.status_code == 201 and r.json()["status"] == "created", r.content
    listed = api_reader.get("/queues/default/schedules").json()
    assert [s["name"] for s in listed] == ["nightly"] and listed[0]["next_ms"]
    assert api_operator.post("/queues/default/schedules/nightly/pause").json() == {
        "changed": True}
    rid = api_operator.post("/queues/default/schedules/nightly/run-now").json()["request_id"]
    assert read.request(console, rid) is not None
    bad = api_admin.post("/queues/default/schedules", body | {"name": "x", "cron": "61 * * * *"})
    assert bad.status_code == 400
    assert api_admin.post("/queues/default/schedules/nightly/remove").json()["changed"]
    console.heartbeat("w-9", {"host": "h", "pid": 9, "dead_after_ms": 60_000,
                              "queues": ["default"]})
    workers = api_reader.get("/queues/default/workers").json()
    assert [w["name"] for w in workers] == ["w-9"]
    assert api_operator.post("/workers/w-9/quiet").status_code == 403
    r = api_admin.post("/workers/w-9/quiet", None)
    assert r.status_code == 200 and r.json()["acted"] == 1, r.content
    assert api_reader.get("/search", q="anything").status_code == 200
    log = api_admin.get("/audit", limit=100).json()
    assert {e["actor"] for e in log} >= {f"token:{api_admin.name}", f"token:{api_operator.name}"}
    assert api_reader.get("/audit").status_code == 403  # an operator may not read it
    assert AuditEntry.objects.filter(source="api").count() >= 6


def test_every_endpoint_refuses_without_a_token(db: Any, client: Any) -> None:
    from core.api.app import _built

    paths = _built[0].get_openapi_schema()["paths"]
    for path, ops in paths.items():
        url = path.replace("{queue}", "default").replace("{request_id}", "r1") \
            .replace("{bulk_id}", "1").replace("{worker}", "w").replace("{command}", "quiet") \
            .replace("{name}", "n")
        for method in ops:
            r = getattr(client, method)(url, content_type="application/json")
            assert r.status_code == 401, (method, url, r.status_code)

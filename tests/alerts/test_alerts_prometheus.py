"""Issue 36, item 5: the conditions as Prometheus alerting rules and a Grafana dashboard,
generated from /metrics and shipped in docs/prometheus/: every series they name is one that
/metrics serves; promtool accepts the rules and, given series, fires them (when promtool is
installed); a condition whose series /metrics lacks is left out, saying why."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from core.console import prometheus as prom
from core.queue import Queue

pytestmark = pytest.mark.django_db
DOCS = Path(__file__).resolve().parents[2] / "docs" / "prometheus"
RULES, DASHBOARD = DOCS / "queueadmin-alerts.rules.yml", DOCS / "queueadmin-dashboard.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (Debian's package `prometheus` has it)")


@pytest.fixture
def metrics_text(alerting: Queue, settings: Any) -> str:
    """/metrics as the console serves it, with a request waiting for a worker and a dead
    letter mirrored (so that the families have samples and labels)."""
    from tests.mirror_support import mirror

    settings.METRICS_TOKEN = "t"
    alerting.submit([1], handler="resize", request_id="r1")
    alerting.submit([1], handler="parse", request_id="r2", max_attempts=1)
    [lease] = alerting.dequeue("w", 1, handlers=["parse"])
    alerting.fail(lease, "ValueError: bad row", retry=False, worker="w")
    mirror(alerting)
    got = Client().get("/metrics", headers={"Authorization": "Bearer t"})
    assert got.status_code == 200
    return got.content.decode()


def test_metrics_exports_the_oldest_waiting_works_age_as_waiting_age_reads_it(
    metrics_text: str, alerting: Queue
) -> None:
    from core.alerts.look import Look

    [line] = [x for x in metrics_text.splitlines()
              if x.startswith('queueadmin_oldest_waiting_seconds{queue="default"}')]
    exported = float(line.split()[-1])
    a = Look().attention("default")
    assert a.oldest_waiting_ms is not None
    assert 0 <= exported <= (a.now_ms - a.oldest_waiting_ms) / 1000 + 0.01
    alerting.cancel("r1")  # nothing waits any more: 0
    from django.core.cache import cache

    cache.clear()
    text = Client().get("/metrics", headers={"Authorization": "Bearer t"}).content.decode()
    assert 'queueadmin_oldest_waiting_seconds{queue="default"} 0.0' in text


def shipped_exprs() -> list[str]:
    exprs = [json.loads(line.split(":", 1)[1]) for line in RULES.read_text().splitlines()
             if line.strip().startswith("expr:")]
    board = json.loads(DASHBOARD.read_text())
    exprs += [t["expr"] for p in board["panels"] for t in p["targets"]]
    exprs += [v["query"] for v in board["templating"]["list"] if v["type"] == "query"]
    return exprs


def test_every_series_the_shipped_rules_and_dashboard_name_is_in_metrics(
    metrics_text: str
) -> None:
    served = prom.exposed_series(prom.families(metrics_text))
    exprs = shipped_exprs()
    assert len(exprs) > 15
    named = set().union(*(prom.metrics_named(e) for e in exprs))
    assert {"queueadmin_tasks_waiting_no_worker", "queueadmin_redis_up",
            "queueadmin_handler_tasks_total", "queueadmin_task_duration_seconds_bucket"} <= named
    assert named - served == set(), "run `manage.py alert prometheus --out docs/prometheus`"


def test_the_command_writes_rules_and_dashboard_from_metrics(
    metrics_text: str, tmp_path: Path
) -> None:
    out = io.StringIO()
    call_command("alert", "prometheus", "--out", str(tmp_path), stdout=out)
    said = out.getvalue()
    assert "(9 rules)" in said
    assert "not expressed: schedule-late: /metrics counts schedules by status" in said
    rules = (tmp_path / "queueadmin-alerts.rules.yml").read_text()
    assert 'expr: "queueadmin_tasks_waiting_no_worker > 0"' in rules
    board = json.loads((tmp_path / "queueadmin-dashboard.json").read_text())
    served = prom.exposed_series(prom.families(metrics_text))
    for panel in board["panels"]:
        assert prom.metrics_named(panel["targets"][0]["expr"]) <= served

    saved = tmp_path / "metrics.txt"
    saved.write_text(metrics_text)
    call_command("alert", "prometheus", "--out", str(tmp_path / "b"), "--metrics", str(saved),
                 stdout=io.StringIO())
    assert (tmp_path / "b" / "queueadmin-alerts.rules.yml").read_text() == rules
    saved.write_text("# TYPE something_else gauge\nsomething_else 1\n")
    with pytest.raises(CommandError, match="no queueadmin metric in that text"):
        call_command("alert", "prometheus", "--out", str(tmp_path), "--metrics", str(saved))
    with pytest.raises(CommandError, match="cannot read"):
        call_command("alert", "prometheus", "--out", str(tmp_path), "--metrics",
                     str(tmp_path / "none"))


def test_a_condition_whose_series_metrics_lacks_is_left_out_saying_why() -> None:
    text = ("# HELP queueadmin_redis_up up\n# TYPE queueadmin_redis_up gauge\n"
            "queueadmin_redis_up 1.0\n"
            "# HELP queueadmin_mirror_lag_seconds lag\n"
            "# TYPE queueadmin_mirror_lag_seconds gauge\n"
            'queueadmin_mirror_lag_seconds{queue="default"} 3.0\n')
    fams = prom.families(text)
    assert fams["queueadmin_mirror_lag_seconds"].labels == ("queue",)
    kept, left = prom.rules(fams)
    assert [r.condition for r in kept] == ["redis-down", "mirror-lag"]
    assert left["no-live-worker"] == "/metrics has no queueadmin_tasks_waiting_no_worker"
    assert left["dead-rate"] == "/metrics has no queueadmin_tasks_total"
    yaml_text = prom.rules_yaml(fams)
    assert "#   no-live-worker: /metrics has no queueadmin_tasks_waiting_no_worker" in yaml_text
    assert "QueueadminMirrorLag" in yaml_text and "QueueadminNoLiveWorker" not in yaml_text


@needs_promtool
def test_promtool_accepts_the_shipped_rules() -> None:
    done = subprocess.run([str(PROMTOOL), "check", "rules", str(RULES)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 9 rules found" in done.stdout


@needs_promtool
def test_promtool_fires_the_shipped_rules_on_series(tmp_path: Path) -> None:
    """promtool's rule unit tests: a handler's tasks waiting with no worker for 2 minutes
    fire QueueadminNoLiveWorker (held for its 1m first), Redis down fires
    QueueadminRedisDown, waiting work older than 10 minutes QueueadminWaitingOld, and a
    healthy series fires nothing."""
    shutil.copy(RULES, tmp_path / "rules.yml")
    (tmp_path / "test.yml").write_text(json.dumps({
        "rule_files": ["rules.yml"], "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [
                {"series": 'queueadmin_tasks_waiting_no_worker{queue="default",'
                           'handler="resize"}', "values": "3x10"},
                {"series": "queueadmin_redis_up", "values": "1 1 0 0 0 0 0 0 0 0"},
                {"series": 'queueadmin_expired_leases{queue="default"}', "values": "0x10"},
                {"series": 'queueadmin_oldest_waiting_seconds{queue="default"}',
                 "values": "0+60x20"},  # 4 s older each second: 720 s at 3m
            ],
            "alert_rule_test": [
                {"eval_time": "30s", "alertname": "QueueadminNoLiveWorker", "exp_alerts": []},
                {"eval_time": "2m", "alertname": "QueueadminNoLiveWorker", "exp_alerts": [{
                    "exp_labels": {"severity": "critical", "queue": "default",
                                   "handler": "resize"},
                    "exp_annotations": {
                        "summary": "3 tasks of handler resize wait in queue default and no "
                                   "live worker runs that handler",
                        "condition": "no-live-worker"}}]},
                {"eval_time": "2m", "alertname": "QueueadminRedisDown", "exp_alerts": [{
                    "exp_labels": {"severity": "critical"},
                    "exp_annotations": {"summary": "queueadmin's Redis does not answer",
                                        "condition": "redis-down"}}]},
                {"eval_time": "2m", "alertname": "QueueadminExpiredLeases", "exp_alerts": []},
                {"eval_time": "2m", "alertname": "QueueadminWaitingOld", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "QueueadminWaitingOld", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "queue": "default"},
                    "exp_annotations": {
                        "summary": "the oldest waiting work in queue default is 12m 0s old",
                        "condition": "waiting-age"}}]},
            ]}]}))
    done = subprocess.run([str(PROMTOOL), "test", "rules", "test.yml"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout

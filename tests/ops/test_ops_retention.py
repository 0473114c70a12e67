"""Retention settings (issue 35, item 2) through the service layer and the commands: admins set
and take back how long a kind is kept, in every queue or one, each change one audit entry (a
refusal too); `retention show` says what holds and where it comes from; `prune` removes what
is past it and prints what went; bad input is one line, exit 2."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from core.models import AuditEntry, Request, RetentionSetting
from core.ops import retention as ops
from core.ops.errors import BadInput, Refused
from core.queue import Queue
from tests.mirror_support import finish, mirror
from tests.ops_support import CLI, last_audit
from tests.stack_support import migrated_sqlite

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def keep(kind: str, queue: str = "") -> int | None:
    return RetentionSetting.objects.get(kind=kind, queue=queue).seconds


def test_an_admin_sets_a_queues_retention_and_it_is_audited(admin_role_user: User) -> None:
    result = ops.set_retention(admin_role_user, "requests", "90s", queue="reports")

    assert keep("requests", "reports") == 90
    assert "kept for 90s in queue reports" in result.message and "were for 30d" in result.message
    entry = last_audit()
    assert (entry.actor, entry.action, entry.queue, entry.acted) == (
        "ada", "retention-set", "reports", 1)
    assert entry.target == "requests in queue reports: 30d -> 90s"
    # The same again changes nothing, and says so.
    again = ops.set_retention(admin_role_user, "requests", "90s", queue="reports")
    assert (again.acted, again.skipped) == (0, 1) and "already" in again.message


def test_every_queue_then_the_environment_then_the_default(admin_role_user: User,
                                                           settings: Any) -> None:
    settings.RETENTION = {"audit": "400d"}
    rows = {r.kind.name: r for r in ops.table()[0]}
    assert (rows["audit"].every.text, rows["audit"].every.source) == ("400d", "QA_RETAIN_AUDIT")
    assert (rows["requests"].every.text, rows["requests"].every.source) == ("30d", "default")

    ops.set_retention(admin_role_user, "audit", "forever")
    ops.set_retention(admin_role_user, "audit", "730d", queue="billing")
    rows = {r.kind.name: r for r in ops.table()[0]}
    assert rows["audit"].every.text == "forever" and rows["audit"].every.source == "set by ada"
    assert rows["audit"].queues["billing"].text == "730d"

    ops.unset_retention(admin_role_user, "audit", queue="billing")
    result = ops.unset_retention(admin_role_user, "audit")
    assert "kept for 400d (QA_RETAIN_AUDIT)" in result.message
    assert not RetentionSetting.objects.exists()
    assert last_audit().target == "audit in every queue: forever -> 400d (QA_RETAIN_AUDIT)"


@pytest.mark.parametrize("role", ["operator_user", "viewer_user"])
def test_only_admins_change_retention_and_a_refusal_is_audited(role: str,
                                                               request: Any) -> None:
    who = request.getfixturevalue(role)
    with pytest.raises(Refused, match="change_retentionsetting"):
        ops.set_retention(who, "requests", "1d")
    assert not RetentionSetting.objects.exists()
    entry = last_audit()
    assert entry.refused and entry.action == "retention-set" and entry.actor == who.username
    with pytest.raises(Refused):
        ops.prune_now(who)
    assert last_audit().action == "prune" and last_audit().refused


@pytest.mark.parametrize(("kind", "duration", "queue", "says"), [
    ("bogus", "1d", None, "'bogus' is not a kind of history: one of requests, dead"),
    ("requests", "10x", None, "'10x' is not a duration"),
    ("requests", "", None, "is not a duration"),
    ("requests", "0s", None, "keeps nothing"),
    ("requests", "99999999d", None, "over 100 years"),
    ("requests", "1d", "bad queue!", "invalid queue name"),
])
def test_bad_input_is_refused_with_what_is_wrong(admin_role_user: User, kind: str,
                                                 duration: str, queue: str | None,
                                                 says: str) -> None:
    with pytest.raises(BadInput, match=says.replace("(", r"\(")):
        ops.set_retention(admin_role_user, kind, duration, queue=queue)
    assert not RetentionSetting.objects.exists()


def test_a_setting_that_is_not_a_duration_names_its_variable(settings: Any) -> None:
    settings.RETENTION = {"requests": "a month"}

    with pytest.raises(BadInput, match="QA_RETAIN_REQUESTS: 'a month' is not a duration"):
        ops.table()
    with pytest.raises(BadInput, match="QA_RETAIN_REQUESTS"):
        ops.prune_now(CLI)


def test_retention_show_and_set_from_the_command_line() -> None:
    out = io.StringIO()
    call_command("retention", "set", "requests", "12h", "--queue", "reports", stdout=out)
    call_command("retention", "set", "audit", "forever", stdout=out)
    assert "kept for 12h in queue reports" in out.getvalue()
    assert last_audit().actor.startswith("os:") and last_audit().source == "cli"

    out = io.StringIO()
    call_command("retention", "show", stdout=out)
    lines = {line.split()[0]: line for line in out.getvalue().splitlines()}
    assert "30d" in lines["requests"] and "reports 12h" in lines["requests"]
    assert "forever" in lines["audit"] and "os:" in lines["audit"]
    assert set(lines) >= {"dead", "search", "bulk", "datajobs", "handler-minutes",
                          "handler-hours", "last"}

    out = io.StringIO()
    call_command("retention", "show", "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert shown["kinds"]["requests"]["queues"]["reports"]["seconds"] == 12 * 3600
    assert shown["kinds"]["audit"]["seconds"] is None


def test_retention_set_as_a_console_user_follows_their_permissions(operator_user: User
                                                                   ) -> None:
    with pytest.raises(CommandError, match="may not retention-set"):
        call_command("retention", "set", "requests", "1d", "--as", "otto", stdout=io.StringIO())
    assert not RetentionSetting.objects.exists()


def test_prune_prints_what_it_removed(queue: Queue, settings: Any, tmp_path: Path) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # prune needs no Redis
    queue.submit([1], request_id="old", handler="h")
    finish(queue)
    mirror(queue)
    Request.objects.update(finished_at=datetime.now(UTC) - timedelta(days=31))
    entry = AuditEntry.objects.create(actor="a", source="cli", action="pause", queue="q")
    AuditEntry.objects.filter(pk=entry.pk).update(at=datetime.now(UTC) - timedelta(days=400))
    export = tmp_path / "audit.jsonl"

    out = io.StringIO()
    call_command("prune", "--export-audit", str(export), stdout=out)

    text = out.getvalue()
    assert text.startswith("pruned ")
    lines = {line.split()[0]: line for line in text.splitlines() if line.startswith("  ")}
    assert lines["requests"].split()[1] == "1" and "of their events" in lines["requests"]
    assert lines["audit"].split()[1] == "1" and lines["dead"].split()[1] == "0"
    assert "audit entries written out first: 1" in text
    assert json.loads(export.read_text())["id"] == entry.pk
    assert not Request.objects.exists()
    # The request, its search document (as old: the test clock's) and the audit entry.
    assert last_audit().action == "prune" and last_audit().acted == 3


def test_prune_json(queue: Queue) -> None:
    out = io.StringIO()
    call_command("prune", "--json", stdout=out)
    shown = json.loads(out.getvalue())
    assert set(shown["removed"]) >= {"requests", "dead", "search", "audit", "bulk",
                                     "handler-minutes", "handler-hours"}
    assert shown["errors"] == []


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    var = tmp_path_factory.mktemp("retention-cli") / "var"
    var.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {
        "REDIS_URL": "redis://127.0.0.1:1/0", "SECRET_KEY": "cli-tests",
        "DJANGO_SETTINGS_MODULE": "queueadmin.settings", "QA_VAR_DIR": str(var),
        "QA_SPARK": "off"}
    migrated_sqlite(var / "db.sqlite3")  # as migrate makes it, 3 s of CPU sooner
    return env


@pytest.mark.parametrize(("args", "says"), [
    (["retention", "set", "bogus", "30d"], "'bogus' is not a kind of history"),
    (["retention", "set", "requests", "30 days"], "'30 days' is not a duration"),
    (["retention", "set", "requests", "30d", "--queue", "bad queue!"], "invalid queue name"),
    (["retention", "unset", "nope"], "'nope' is not a kind of history"),
    (["prune", "--export-audit", "/"], "--export-audit /: cannot write there"),
])
def test_bad_input_exits_2_with_one_line(env: dict[str, str], args: list[str],
                                         says: str) -> None:
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)

    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in done.stderr, lines
    assert done.stdout == ""


def test_a_bad_setting_exits_2_naming_it(env: dict[str, str]) -> None:
    done = subprocess.run([sys.executable, "manage.py", "prune"], cwd=ROOT,
                          env=env | {"QA_RETAIN_SEARCH": "soon"}, capture_output=True,
                          text=True, timeout=120)

    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "CommandError: prune: QA_RETAIN_SEARCH: 'soon' is not a duration: give a number and a "
        "unit (s, m, h, d, w), such as 30d, 12h or 90s (or several: 1d12h), or \"forever\""]

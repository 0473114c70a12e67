"""Limits on keys (issue 37) through the service layer and `manage.py limit`: admins set,
change and remove a queue's limits, each change one audit entry (a refusal and bad input too);
the next dequeue applies them; `limit show` says each limit's use against its cap; bad input is
one line, exit 2."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError

from core.ops import limits as ops
from core.ops.errors import BadInput, Refused
from core.queue import Queue, read
from tests.ops_support import last_audit
from tests.stack_support import migrated_sqlite

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def limit(name: str, *args: str, **kw: Any) -> str:
    out = io.StringIO()
    call_command("limit", name, *args, stdout=out, **kw)
    return out.getvalue()


def test_an_admin_sets_changes_and_removes_a_limit_audited(
    admin_role_user: User, django_queue: Queue
) -> None:
    result = ops.set_limit(admin_role_user, "reports", "handler=report", rate="2/1s",
                           concurrency=1)
    assert result.acted == 1 and "set, on handler=report: 2/1s, concurrency 1" in result.message
    entry = last_audit()
    assert (entry.actor, entry.action, entry.queue, entry.acted) == (
        "ada", "limit-set", "default", 1)
    assert entry.target == "limit reports: none -> on handler=report: 2/1s, concurrency 1"

    django_queue.submit([1, 2, 3], handler="report")
    django_queue.submit([4], handler="other")
    leased = django_queue.dequeue("w", 10)
    assert sorted(x.payload for x in leased) == [1, 4]  # concurrency 1 holds report back

    again = ops.set_limit(admin_role_user, "reports", "handler=report", rate="2/1s",
                          concurrency="1")
    assert (again.acted, again.skipped) == (0, 1) and "already" in again.message
    changed = ops.set_limit(admin_role_user, "reports", "handler=report", concurrency=3)
    assert "changed to on handler=report: concurrency 3 (was on handler=report: 2/1s, " \
           "concurrency 1)" in changed.message
    assert len(django_queue.dequeue("w", 10)) == 2  # the change applies at the next dequeue

    gone = ops.remove_limit(admin_role_user, "reports")
    assert gone.acted == 1 and read.limits(django_queue) == []
    assert last_audit().target == "limit reports: on handler=report: concurrency 3 -> none"
    assert ops.remove_limit(admin_role_user, "reports").acted == 0


@pytest.mark.parametrize("role", ["operator_user", "viewer_user"])
def test_only_admins_change_limits_and_a_refusal_is_audited(
    role: str, request: Any, django_queue: Queue
) -> None:
    who = request.getfixturevalue(role)
    with pytest.raises(Refused, match="pause_queue"):
        ops.set_limit(who, "x", "queue", rate="1/1s")
    assert read.limits(django_queue) == []
    entry = last_audit()
    assert entry.refused and entry.action == "limit-set" and entry.actor == who.username
    with pytest.raises(Refused):
        ops.remove_limit(who, "x")
    # Everyone reads them.
    assert ops.table() == []


@pytest.mark.parametrize(("on", "kw", "says"), [
    ("customer", {"rate": "1/1s"}, "a limit is on queue, handler=H"),
    ("handler=", {"rate": "1/1s"}, "name the handler"),
    ("queue=x", {"rate": "1/1s"}, "names no value"),
    ("handler=a b", {"rate": "1/1s"}, "handler name"),
    ("handler=h", {}, r"give a rate \(N/PERIOD\), a concurrency"),
    ("handler=h", {"rate": "100"}, "say N/PERIOD"),
    ("handler=h", {"rate": "100/fortnight"}, "not a period"),
    ("handler=h", {"rate": "0/1s"}, "at least 1"),
    ("handler=h", {"rate": "1/2d"}, "1ms to 1d"),
    ("handler=h", {"concurrency": "many"}, "a whole number"),
    ("handler=h", {"concurrency": "0"}, "1 to 1,000,000"),
])
def test_bad_input_is_refused_with_a_message_and_audited(
    admin_role_user: User, django_queue: Queue, on: str, kw: dict[str, str], says: str
) -> None:
    with pytest.raises(BadInput, match=says):
        ops.set_limit(admin_role_user, "x", on, **kw)
    assert read.limits(django_queue) == []
    entry = last_audit()
    assert entry.action == "limit-set" and entry.error and entry.acted == 0


def test_rates_read_as_people_write_them() -> None:
    assert ops.parse_rate("100/1s") == (100, 1000)
    assert ops.parse_rate("5/s") == (5, 1000)
    assert ops.parse_rate("600/1m") == (600, 60_000)
    assert ops.parse_rate("10/500ms") == (10, 500)
    assert ops.parse_on("field=customer") == ("field", "customer")
    assert [ops.period_text(ms) for ms in (1000, 60_000, 500, 3_600_000, 90_000)] == [
        "1s", "1m", "500ms", "1h", "90s"]


def test_the_command_sets_shows_and_removes(django_queue: Queue) -> None:
    out = limit("set", "api", on="resource=payments", rate="100/1s", concurrency="2")
    assert "limit api of queue default set, on resource=payments: 100/1s, concurrency 2" in out
    django_queue.submit([1, 2, 3], handler="h", resources=["payments"])
    assert len(django_queue.dequeue("w", 10)) == 2
    shown = limit("show")
    assert "api" in shown and "resource=payments" in shown
    assert "2/2" in shown and "2/100 per 1s" in shown
    data = json.loads(limit("show", json=True))
    assert data["default"][0] | {} == {
        "name": "api", "on": "resource", "value": "payments", "rate": 100, "per_ms": 1000,
        "concurrency": 2, "held": 2, "started": 2}
    entry = last_audit()
    assert entry.actor.startswith("os:") and entry.action == "limit-set"
    assert "removed" in limit("remove", "api")
    assert "no limits in any queue" in limit("show")


def test_the_command_on_another_queue_notes_one_nobody_used(django_queue: Queue) -> None:
    out = limit("set", "t", on="tenant=acme", concurrency="1", queue="billing")
    assert "note: no producer or worker has used queue 'billing' yet" in out
    assert "tenant=acme" in limit("show", queue="billing")
    assert "no limits in queue default" in limit("show", queue="default")


@pytest.mark.parametrize(("args", "says"), [
    (["set", "x", "--on", "handler=h"], r"a concurrency \(N tasks at once\), or both"),
    (["set", "x", "--on", "handler=h", "--rate", "lots"], "say N/PERIOD"),
    (["set", "bad name", "--on", "queue", "--rate", "1/s"], "limit name"),
    (["set", "x", "--on", "queue", "--rate", "1/s", "--queue", "no way"], "queue name"),
])
def test_the_commands_bad_input_is_one_line_exit_2(django_queue: Queue, args: list[str],
                                                    says: str) -> None:
    with pytest.raises(CommandError, match=says) as info:
        call_command("limit", *args)
    assert info.value.returncode == 2


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    var = tmp_path_factory.mktemp("limit-cli") / "var"
    var.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"} | {
        "SECRET_KEY": "cli-tests", "DJANGO_SETTINGS_MODULE": "queueadmin.settings",
        "QA_VAR_DIR": str(var), "QA_SPARK": "off"}
    migrated_sqlite(var / "db.sqlite3")  # as migrate makes it, 3 s of CPU sooner
    return env


@pytest.mark.slow
def test_the_command_in_a_process_says_what_is_wrong_in_one_line(
    env: dict[str, str], django_queue: Queue, settings: Any
) -> None:
    env = env | {"REDIS_URL": settings.REDIS_URL, "QUEUE_PREFIX": settings.QUEUE_PREFIX}
    run = subprocess.run([sys.executable, "manage.py", "limit", "set", "x", "--on", "moon",
                          "--rate", "1/s"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and "a limit is on queue, handler=H" in lines[0], lines
    done = subprocess.run([sys.executable, "manage.py", "limit", "set", "x", "--on", "queue",
                           "--rate", "5/1s"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert [u.limit.rate for u in read.limits(django_queue)] == [5]


def test_a_field_limit_shows_its_caps_per_value(django_queue: Queue) -> None:
    limit("set", "per-customer", on="field=customer", rate="10/1s", concurrency="2")
    shown = limit("show")
    assert "field=customer" in shown and "each 2" in shown and "each 10 per 1s" in shown

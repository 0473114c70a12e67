"""`manage.py alert`, the interfaces issue 36's check uses: `channel add NAME --webhook URL
[--secret S]` (and `--slack`, `--email`), `channel test NAME` answered by a real receiver,
`rule add NAME --when CONDITION [--queue] [--handler] [--threshold] [--for] --channel NAME` for
the five conditions the check names, `alert list`; bad input a CommandError saying why."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from core.models import AlertChannel, AlertRule, AuditEntry
from core.queue import Queue
from tests.alerts_support import Receiver, SmtpReceiver

pytestmark = pytest.mark.django_db
SECRET = "a-secret-of-32-characters-long!!"


def alert(*argv: str) -> str:
    out = io.StringIO()
    call_command("alert", *argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_channels_rules_and_the_list_from_the_command_line(
    alerting: Queue, receiver: Receiver, smtp: SmtpReceiver
) -> None:
    said = alert("channel", "add", "oncall", "--webhook", receiver.url(), "--secret", SECRET)
    assert said == f"added webhook channel oncall: {receiver.url().rsplit('/', 1)[0]}/…\n"
    made = alert("channel", "add", "unsigned", "--webhook", receiver.url("/other"))
    secret = AlertChannel.objects.get(name="unsigned").secret
    assert len(secret) >= 32 and f"not shown again): {secret}" in made
    alert("channel", "add", "team", "--slack", receiver.url("/services/T/B/x"))
    alert("channel", "add", "ops", "--email", "ops@example.org")

    assert alert("channel", "test", "oncall").startswith("test sent to oncall: HTTP 200")
    [body] = receiver.bodies("/hook")
    assert body["status"] == "test" and receiver.calls[0].signed_by(SECRET)
    assert alert("channel", "test", "team").startswith("test sent to team: HTTP 200")
    assert receiver.ids("/services/T/B/x") and receiver.ids("/services/T/B/x")[0]
    assert alert("channel", "test", "ops").startswith("test sent to ops: mail accepted")
    [mail] = smtp.wait_for(1, 10)
    assert mail["To"] == "ops@example.org" and "TEST" in mail["Subject"]

    rules = {
        "bugs": ["--when", "new-fingerprint", "--queue", "default"],
        "stuck": ["--when", "no-live-worker", "--queue", "default", "--handler", "resize",
                  "--for", "1m"],
        "old": ["--when", "waiting-age", "--threshold", "10m"],
        "late": ["--when", "schedule-late", "--threshold", "2m", "--for", "30s"],
        "jobs": ["--when", "datajob-failed", "-q", "default"],  # -q as every command takes
    }
    for name, argv in rules.items():
        assert alert("rule", "add", name, *argv, "--channel", "oncall", "--channel", "ops") \
            .startswith(f"added rule {name}: ")
    got = {r.name: r for r in AlertRule.objects.all()}
    assert (got["stuck"].condition, got["stuck"].handler, got["stuck"].for_s) == (
        "no-live-worker", "resize", 60)
    assert got["old"].threshold == 600 and got["late"].for_s == 30
    assert sorted(c.name for c in got["jobs"].channels.all()) == ["oncall", "ops"]

    listed = alert("list")
    assert "channels (4):" in listed and "rules (5):" in listed
    assert ("stuck                no-live-worker; queue default; handler resize; threshold 0; "
            "for 1m; quiet 5m; at most 20/h; to oncall, ops") in listed
    assert "waiting-age; threshold 10m" in listed
    assert SECRET not in listed and "/services/T/B/x" not in listed  # credentials stay hidden
    assert "outbox: 3 sent" in listed
    actions = list(AuditEntry.objects.values_list("action", flat=True))
    assert actions.count("alert-channel-add") == 4 and actions.count("alert-rule-add") == 5


@pytest.mark.parametrize("argv, reason", [
    (["channel", "add", "x", "--webhook", "ftp://h/x"], "is not an http:// or https:// URL"),
    (["channel", "add", "x", "--email", "nobody"], "is not an email address"),
    (["channel", "add", "x", "--slack", "https://h/x", "--secret", "s" * 20],
     "--secret goes with --webhook"),
    (["channel", "test", "nope"], "there is no alert channel named 'nope'"),
    (["rule", "add", "r", "--when", "sometimes", "--channel", "c"], "no condition 'sometimes'"),
    (["rule", "add", "r", "--when", "waiting-age", "--threshold", "soon", "--channel", "c"],
     "is not a duration"),
    (["rule", "add", "r", "--when", "waiting-age", "--for", "-1", "--channel", "c"],
     "is not a duration"),
    (["rule", "add", "r", "--when", "waiting-age", "--handler", "h", "--channel", "c"],
     "waiting-age is not narrowed by --handler"),
    (["rule", "add", "r", "--when", "datajob-failed", "--threshold", "3", "--channel", "c"],
     "datajob-failed takes no threshold"),
    (["rule", "add", "r", "--when", "no-live-worker", "--threshold", "many", "--channel", "c"],
     "no-live-worker's threshold 'many' is not a number"),
    (["rule", "add", "r", "--when", "waiting-age", "--channel", "gone"],
     "there is no alert channel named 'gone'"),
    (["rule", "add", "r", "--when", "waiting-age", "--queue", "a b", "--channel", "c"],
     "queue name"),
    # A NUL is refused before it reaches the database (PostgreSQL refuses it in text).
    (["rule", "add", "r", "--when", "datajob-failed", "--tenant", "a\x00b", "--channel", "c"],
     "--tenant holds a control character"),
    (["channel", "add", "x", "--webhook", "https://h/a\x00b"],
     "--webhook holds a control character"),
    (["channel", "add", "x", "--webhook", "https://h/a", "--secret", "s" * 20 + "\x00"],
     "--secret holds a control character"),
    (["channel", "test", "a\x00"], "there is no alert channel named 'a\\x00'"),
    (["rule", "remove", "r\x00"], "there is no alert rule named 'r\\x00'"),
])
def test_bad_input_is_a_command_error_saying_why(
    alerting: Queue, argv: list[str], reason: str
) -> None:
    alert("channel", "add", "c", "--email", "c@example.org")
    with pytest.raises(CommandError, match=None) as refused:
        alert(*argv)
    assert reason in str(refused.value)
    assert not AlertRule.objects.exists()


def test_a_failed_test_fails_the_command(alerting: Queue, settings: Any) -> None:
    alert("channel", "add", "nobody", "--webhook", "http://127.0.0.1:9/x")
    with pytest.raises(CommandError, match=r"the test to nobody failed: URLError"):
        alert("channel", "test", "nobody")

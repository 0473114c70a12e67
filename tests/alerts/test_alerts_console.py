"""The Alerts page (admins): rules, channels, incidents and the outbox; a channel and a rule
added through its forms (audited), bad input a 400 with the reason, "Send a test" answered by
a real receiver, removal asked first; operators and viewers refused (and the refusal audited),
the navigation's link only for who may use it."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from core.models import AlertChannel, AlertRule, AuditEntry
from core.ops import alerts as ops
from core.queue import Queue
from tests.alerts_support import Receiver
from tests.ops_support import CLI

pytestmark = pytest.mark.django_db


def test_only_admins_see_the_page_and_its_link(
    alerting: Queue, admin: Client, operator: Client, viewer: Client
) -> None:
    page = admin.get("/alerts/")
    assert page.status_code == 200
    assert b'href="/alerts/?queue=default"' in page.content
    assert b"No rule yet" in page.content and b"No channel yet" in page.content
    for other in (operator, viewer):
        assert other.get("/alerts/").status_code == 403
        assert b'href="/alerts/' not in other.get("/").content


def test_an_admin_adds_a_channel_and_a_rule_and_sends_a_test(
    alerting: Queue, admin: Client, receiver: Receiver
) -> None:
    said = admin.post("/alerts/channels/add/?queue=default", {
        "name": "oncall", "kind": "webhook", "target": receiver.url()}, follow=True)
    assert said.status_code == 200
    secret = AlertChannel.objects.get(name="oncall").secret
    assert len(secret) >= 32 and secret.encode() in said.content  # shown once, in the message
    assert secret.encode() not in admin.get("/alerts/").content

    added = admin.post("/alerts/rules/add/?queue=default", {
        "name": "stuck", "when": "no-live-worker", "queue": "default", "for_": "1m",
        "channels": ["oncall"]}, follow=True)
    assert b"Added rule stuck." in added.content
    rule = AlertRule.objects.get(name="stuck")
    assert (rule.condition, rule.queue, rule.for_s) == ("no-live-worker", "default", 60)
    assert [c.name for c in rule.channels.all()] == ["oncall"]

    tested = admin.post("/alerts/channels/oncall/test/?queue=default", follow=True)
    assert b"Test sent to oncall: HTTP 200" in tested.content
    [body] = receiver.bodies()
    assert body["status"] == "test" and "a test of alert channel oncall, asked by ada" \
        in body["summary"]
    assert receiver.calls[0].signed_by(secret)
    assert list(AuditEntry.objects.filter(actor="ada").order_by("id")
                .values_list("action", "acted")) == [
        ("alert-channel-add", 1), ("alert-rule-add", 1), ("alert-channel-test", 1)]


def test_a_failed_test_says_why(alerting: Queue, admin: Client) -> None:
    ops.add_channel(CLI, "nobody", webhook="http://127.0.0.1:9/x")
    said = admin.post("/alerts/channels/nobody/test/", follow=True)
    assert b"The test to nobody failed: URLError" in said.content


@pytest.mark.parametrize("form, reason", [
    ({"name": "x", "when": "nope", "channels": ["c"]}, b"no condition &#x27;nope&#x27;"),
    ({"name": "x", "when": "waiting-age", "handler": "h", "channels": ["c"]},
     b"waiting-age is not narrowed by --handler"),
    ({"name": "x", "when": "waiting-age", "threshold": "soon", "channels": ["c"]},
     b"is not a duration"),
    # Digits of other scripts: "²".isdigit() is true but int() refuses it (it was a 500).
    ({"name": "x", "when": "waiting-age", "for_": "\u00b2", "channels": ["c"]},
     b"is not a duration"),
    ({"name": "x", "when": "waiting-age", "threshold": "\u0661\u0662m", "channels": ["c"]},
     b"is not a duration"),
    ({"name": "x", "when": "waiting-age"}, b"at least one channel"),
    ({"name": "x y", "when": "waiting-age", "channels": ["c"]}, b"rule name"),
    ({"name": "x", "when": "waiting-age", "channels": ["gone"]}, b"no alert channel named"),
    ({"name": "x", "when": "waiting-age", "max_per_hour": "many", "channels": ["c"]},
     b"is not a whole number"),
])
def test_bad_rules_are_a_400_with_the_reason(
    alerting: Queue, admin: Client, form: dict[str, Any], reason: bytes
) -> None:
    ops.add_channel(CLI, "c", email="a@example.org")
    got = admin.post("/alerts/rules/add/", form)
    assert got.status_code == 400
    assert reason in got.content
    assert not AlertRule.objects.exists()


@pytest.mark.parametrize("form, reason", [
    ({"name": "x", "kind": "webhook", "target": "ftp://x"}, b"is not an http"),
    ({"name": "x", "kind": "email", "target": "not-an-address"}, b"is not an email address"),
    ({"name": "x", "kind": "slack", "target": "https://h/x", "secret": "s" * 20},
     b"--secret goes with --webhook"),
    ({"name": "x", "kind": "webhook", "target": "https://h/x", "secret": "short"},
     b"16 to 200 characters"),
    ({"name": "", "kind": "webhook", "target": "https://h/x"}, b"channel name"),
])
def test_bad_channels_are_a_400_with_the_reason(
    alerting: Queue, admin: Client, form: dict[str, Any], reason: bytes
) -> None:
    got = admin.post("/alerts/channels/add/", form)
    assert got.status_code == 400
    assert reason in got.content


def test_operators_are_refused_and_the_refusal_is_audited(
    alerting: Queue, operator: Client
) -> None:
    got = operator.post("/alerts/channels/add/", {"name": "x", "kind": "email",
                                                  "target": "a@example.org"})
    assert got.status_code == 403
    assert not AlertChannel.objects.exists()
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.refused) == ("otto", "alert-channel-add", True)


def test_removing_asks_first_and_a_used_channel_stays(
    alerting: Queue, admin: Client, receiver: Receiver
) -> None:
    ops.add_channel(CLI, "c", webhook=receiver.url())
    ops.add_rule(CLI, ops.RuleSpec(name="r", when="waiting-age", channels=["c"]))
    asked = admin.post("/alerts/rules/r/remove/")
    assert asked.status_code == 200 and b"Remove alert rule r?" in asked.content
    assert AlertRule.objects.filter(name="r").exists()
    used = admin.post("/alerts/channels/c/remove/", {"confirm": "yes"}, follow=True)
    assert b"is a channel of the rules r" in used.content
    admin.post("/alerts/rules/r/remove/", {"confirm": "yes"})
    assert not AlertRule.objects.exists()
    admin.post("/alerts/channels/c/remove/", {"confirm": "yes"})
    assert not AlertChannel.objects.exists()


def test_disable_and_enable(alerting: Queue, admin: Client) -> None:
    ops.add_channel(CLI, "c", email="a@example.org")
    ops.add_rule(CLI, ops.RuleSpec(name="r", when="waiting-age", channels=["c"]))
    said = admin.post("/alerts/rules/r/disable/", follow=True)
    assert b"Rule r disabled." in said.content
    assert not AlertRule.objects.get().enabled
    assert b"was already disabled" in admin.post("/alerts/rules/r/disable/", follow=True).content
    admin.post("/alerts/rules/r/enable/")
    assert AlertRule.objects.get().enabled


@pytest.mark.parametrize("path", ["/alerts/rules/r/explode/", "/alerts/channels/c/explode/",
                                  "/alerts/rules/%00/remove/", "/alerts/channels/%00/test/",
                                  "/alerts/channels/%00/remove/"])
def test_junk_is_never_a_500(alerting: Queue, admin: Client, path: str) -> None:
    assert admin.post(path).status_code in (302, 400, 404)
    assert admin.get(path).status_code in (404, 405)

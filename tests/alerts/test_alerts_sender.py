"""The outbox: a message reaches a real receiver signed, with its id in the body and headers;
a failed attempt is retried with backoff and the same id; a row left "sending" by a sender that
died is sent again with the same id (the receiver drops the repeat); a recovery never
overtakes its firing message; a channel's rate limit holds the rest back; Slack and email
(a local SMTP server) get their own forms."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from core.alerts import channels
from core.alerts.sender import lease, prune, send_due, send_now
from core.models import AlertChannel, AlertMessage
from core.models.alerts import message_body
from tests.alerts_support import Receiver, SmtpReceiver

pytestmark = pytest.mark.django_db
SECRET = "a-secret-of-32-characters-long!!"


def channel(kind: str, target: str, **kw: Any) -> AlertChannel:
    return AlertChannel.objects.create(name=f"{kind}-{AlertChannel.objects.count()}", kind=kind,
                                       target=target, **kw)


def queue(ch: AlertChannel, status: str = "firing", *, summary: str = "it broke",
          incident: Any = None, at: dt.datetime | None = None) -> AlertMessage:
    now = at or timezone.now()
    body = message_body(rule="r1", condition="no-live-worker", status=status, summary=summary,
                        url="http://console.test/workers/", subject="default/h",
                        scope={"queue": "default"}, count=3, started_at=now, at=now)
    return AlertMessage.objects.create(channel=ch, channel_name=ch.name, status=status,
                                       body=body, created_at=now, due_at=now,
                                       incident=incident)


def test_a_webhook_is_signed_and_carries_its_id_in_body_and_headers(
    receiver: Receiver
) -> None:
    m = queue(channel("webhook", receiver.url(), secret=SECRET))

    assert send_due().sent == 1

    [call] = receiver.calls
    body = call.json
    assert body["id"] == str(m.key) == call.headers["X-Queueadmin-Id"] \
        == call.headers["Idempotency-Key"]
    assert {k: body[k] for k in ("rule", "condition", "status", "summary", "url")} == {
        "rule": "r1", "condition": "no-live-worker", "status": "firing",
        "summary": "it broke", "url": "http://console.test/workers/"}
    assert call.headers["Content-Type"] == "application/json"
    assert call.signed_by(SECRET)
    assert not call.signed_by("another secret of the same length!")
    tampered = type(call)(call.path, call.headers, call.raw.replace(b"broke", b"works"), 0)
    assert not tampered.signed_by(SECRET)
    m.refresh_from_db()
    assert (m.delivery, m.attempts, m.response) == ("sent", 1, "HTTP 200")


def test_a_failed_attempt_is_retried_with_backoff_and_the_same_id(receiver: Receiver) -> None:
    receiver.statuses = [500, 503]
    m = queue(channel("webhook", receiver.url(), secret=SECRET))

    assert send_due().retrying == 1
    m.refresh_from_db()
    assert m.delivery == "pending" and "HTTP 500" in m.error
    first_wait = (m.due_at - timezone.now()).total_seconds()
    assert 3 < first_wait < 7  # 5 s, jittered
    assert send_due().sent == 0  # not due yet

    later = m.due_at + dt.timedelta(seconds=1)
    assert send_due(now=later).retrying == 1
    m.refresh_from_db()
    assert (m.due_at - timezone.now()).total_seconds() > first_wait  # 10 s: it doubles
    assert send_due(now=m.due_at + dt.timedelta(seconds=1)).sent == 1

    assert [c.json["id"] for c in receiver.calls] == [str(m.key)] * 3
    assert [c.headers["X-Queueadmin-Attempt"] for c in receiver.calls] == ["1", "2", "3"]
    assert all(c.signed_by(SECRET) for c in receiver.calls)


def test_a_receiver_that_says_when_to_come_back_is_heard(receiver: Receiver) -> None:
    receiver.statuses = [429]
    receiver.headers_out = {"Retry-After": "120"}
    m = queue(channel("webhook", receiver.url()))
    send_due()
    m.refresh_from_db()
    assert 115 < (m.due_at - timezone.now()).total_seconds() <= 121


def test_a_row_left_sending_by_a_dead_sender_goes_again_with_the_same_id(
    receiver: Receiver
) -> None:
    """What a kill -9 between the POST and its mark leaves: the row "sending", claimed by
    an attempt that will never finish. Until the lease is over nobody sends it; then it is
    sent again, with the same id, and marked sent once."""
    m = queue(channel("webhook", receiver.url()))
    now = timezone.now()
    AlertMessage.objects.filter(pk=m.pk).update(delivery="sending", claim="dead", claimed_at=now,
                                                attempts=1)
    assert send_due(now=now + lease() - dt.timedelta(seconds=1)).sent == 0
    assert send_due(now=now + lease() + dt.timedelta(seconds=1)).sent == 1
    m.refresh_from_db()
    assert (m.delivery, m.attempts) == ("sent", 2)
    assert receiver.ids() == [str(m.key)]


def test_the_lease_is_three_times_the_send_timeout(receiver: Receiver, settings: Any) -> None:
    """QA_ALERT_SEND_TIMEOUT_S=2: a row a dead sender left "sending" goes again after 6 s."""
    settings.ALERT_SEND_TIMEOUT_S = 2
    m = queue(channel("webhook", receiver.url()))
    now = timezone.now()
    AlertMessage.objects.filter(pk=m.pk).update(delivery="sending", claim="dead", claimed_at=now,
                                                attempts=1)
    assert send_due(now=now + dt.timedelta(seconds=5)).sent == 0
    assert send_due(now=now + dt.timedelta(seconds=7)).sent == 1
    assert receiver.ids() == [str(m.key)]


def test_a_recovery_waits_for_its_firing_message(receiver: Receiver) -> None:
    from core.models import AlertIncident, AlertRule

    rule = AlertRule.objects.create(name="r1", condition="no-live-worker")
    now = timezone.now()
    inc = AlertIncident.objects.create(rule=rule, subject="default/h", status="resolved",
                                       started_at=now, seen_at=now)
    receiver.statuses = [500]
    ch = channel("webhook", receiver.url())
    fired = queue(ch, "firing", incident=inc)
    queue(ch, "resolved", incident=inc)

    send_due()  # the firing message fails; the recovery must not go before it
    assert [b["status"] for b in receiver.bodies()] == ["firing"]
    fired.refresh_from_db()
    send_due(now=fired.due_at + dt.timedelta(seconds=1))
    assert [b["status"] for b in receiver.bodies()] == ["firing", "firing", "resolved"]


def test_a_channel_rate_limit_holds_the_rest_back_in_order(receiver: Receiver) -> None:
    ch = channel("webhook", receiver.url(), max_per_minute=2)
    rows = [queue(ch, summary=f"m{i}") for i in range(5)]
    out = send_due()
    assert (out.sent, out.waiting) == (2, 3)
    assert send_due().sent == 0  # still within the minute
    assert send_due(now=timezone.now() + dt.timedelta(seconds=61)).sent == 2
    assert [b["summary"] for b in receiver.bodies()] == ["m0", "m1", "m2", "m3"]
    rows[4].refresh_from_db()
    assert rows[4].delivery == "pending"


def test_a_dead_channel_does_not_hold_up_another(receiver: Receiver) -> None:
    dead = channel("webhook", "http://127.0.0.1:9/nobody")
    good = channel("webhook", receiver.url())
    for _ in range(3):
        queue(dead)
    queue(good)
    out = send_due()
    assert (out.sent, out.retrying, out.waiting) == (1, 1, 2)  # one try of the dead channel


def test_slack_gets_its_text_and_the_id(receiver: Receiver) -> None:
    m = queue(channel("slack", receiver.url("/services/T/B/x")), summary="a <b> & c")
    send_due()
    [body] = receiver.bodies("/services/T/B/x")
    assert body["text"].startswith(":red_circle: FIRING *r1* (no-live-worker): a &lt;b&gt; &amp; c")
    assert "<http://console.test/workers/|open in the console>" in body["text"]
    assert receiver.ids() == [str(m.key)]


def test_email_goes_through_smtp_with_the_id_as_message_id(smtp: SmtpReceiver) -> None:
    m = queue(channel("email", "oncall@example.org"), "resolved", summary="workers back")
    assert send_due().sent == 1
    [mail] = smtp.wait_for(1, 10)
    assert mail["To"] == "oncall@example.org"
    assert mail["Subject"] == "[queueadmin] RESOLVED: r1 - workers back"
    assert mail["Message-ID"] == f"<{m.key}@queueadmin>"
    assert str(m.key) in mail.get_payload()
    assert "http://console.test/workers/" in mail.get_payload()


def test_an_unreachable_smtp_server_is_a_retry_not_a_crash(settings: Any) -> None:
    from tests.alerts_support import free_port

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()
    m = queue(channel("email", "oncall@example.org"))
    assert send_due().retrying == 1
    m.refresh_from_db()
    assert m.delivery == "pending" and "refused" in m.error.lower()


def test_a_message_is_given_up_after_a_day_and_a_test_at_once(receiver: Receiver) -> None:
    old = timezone.now() - dt.timedelta(hours=25)
    ch = channel("webhook", "http://127.0.0.1:9/nobody")
    m = queue(ch, at=old)
    t = queue(ch, "test")
    send_due()
    m.refresh_from_db()
    assert m.delivery == "failed"
    assert send_now(t.pk).delivery == "failed"


def test_sent_rows_are_pruned_after_thirty_days(receiver: Receiver) -> None:
    ch = channel("webhook", receiver.url())
    queue(ch, at=timezone.now() - dt.timedelta(days=31))
    keep = queue(ch)
    send_due()
    assert prune() == 1
    assert list(AlertMessage.objects.values_list("pk", flat=True)) == [keep.pk]


def test_the_signature_is_the_documented_one() -> None:
    """docs/alerts.md's worked example (HMAC-SHA256 of "<ts>.<body>"), and its verifying
    code, agree with what the sender signs."""
    import hashlib
    import hmac
    import re
    import time
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "alerts.md").read_text()
    [shown] = re.findall(r"X-Queueadmin-Signature: (v1=[0-9a-f]{64})", docs)
    assert "secret `kkkkkkkkkkkkkkkk`, timestamp\n`1700000000`, raw body " \
           "`{\"id\":\"x\",\"status\":\"test\"}`" in docs
    raw = b'{"id":"x","status":"test"}'
    expected = hmac.new(b"k" * 16, b"1700000000." + raw, hashlib.sha256).hexdigest()
    assert channels.signature("k" * 16, "1700000000", raw) == f"v1={expected}" == shown

    code = docs.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(code, scope)  # the docs' verify(), as a receiver would copy it
    now = str(int(time.time()))
    headers = {"X-Queueadmin-Timestamp": now,
               "X-Queueadmin-Signature": channels.signature("k" * 16, now, raw)}
    assert scope["verify"]("k" * 16, headers, raw)
    assert not scope["verify"]("k" * 16, headers, raw.replace(b"test", b"tost"))
    assert not scope["verify"]("k" * 16, {**headers, "X-Queueadmin-Timestamp": "1700000000"},
                               raw)

"""One message to one channel: a generic webhook (the JSON body signed with HMAC-SHA256, the
signature, a timestamp and the idempotency id in headers: docs/alerts.md), a Slack incoming
webhook, or an email through Django's email backend (so any SMTP server).

Every attempt of one message carries the same id (the outbox row's key): in the webhook's body
and headers, in Slack's text, as the email's Message-ID. A receiver drops a repeat by it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from core.models import AlertChannel

from .errors import AlertsError

USER_AGENT = "queueadmin-alerts/1"
SIGNATURE_VERSION = "v1"
ANSWER_KEPT = 200  # characters of an error answer kept on the outbox row


def timeout_s() -> float:
    """One attempt's connect + answer (QA_ALERT_SEND_TIMEOUT_S); the sender's lease is longer."""
    from django.conf import settings

    return float(settings.ALERT_SEND_TIMEOUT_S)


class SendFailed(AlertsError):
    """The attempt failed; `retry_after` when the receiver said when to come back."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Delivery:
    key: str  # the idempotency id
    body: dict[str, Any]  # with its "id"
    attempt: int


def signature(secret: str, timestamp: str, raw: bytes) -> str:
    """The X-Queueadmin-Signature header's value: "v1=" + hex HMAC-SHA256 of
    "<timestamp>.<raw body>" under the channel's secret."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + raw, hashlib.sha256)
    return f"{SIGNATURE_VERSION}={mac.hexdigest()}"


def send(channel: AlertChannel, d: Delivery) -> str:
    """Deliver; what the receiver answered ("HTTP 200", "250 accepted"). SendFailed if not."""
    if channel.kind == "webhook":
        return _webhook(channel, d)
    if channel.kind == "slack":
        return _post(channel.target, json.dumps(slack_body(d.body)).encode(), {})
    if channel.kind == "email":
        return _email(channel, d)
    raise SendFailed(f"channel {channel.name} is of no kind this version sends ({channel.kind})")


def _webhook(channel: AlertChannel, d: Delivery) -> str:
    raw = json.dumps(d.body, separators=(",", ":"), sort_keys=True).encode()
    ts = str(int(time.time()))
    headers = {"X-Queueadmin-Id": d.key, "Idempotency-Key": d.key,
               "X-Queueadmin-Timestamp": ts, "X-Queueadmin-Attempt": str(d.attempt),
               "X-Queueadmin-Event": str(d.body.get("status", ""))}
    if channel.secret:
        headers["X-Queueadmin-Signature"] = signature(channel.secret, ts, raw)
    return _post(channel.target, raw, headers)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer, not a hop: a POST is never turned into a GET elsewhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def _post(url: str, raw: bytes, headers: dict[str, str]) -> str:
    req = urllib.request.Request(url, data=raw, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": USER_AGENT, **headers})
    try:
        with _OPENER.open(req, timeout=timeout_s()) as answer:
            answer.read(4096)
            return f"HTTP {answer.status}"
    except urllib.error.HTTPError as exc:
        text = exc.read(ANSWER_KEPT).decode(errors="replace").strip()
        raise SendFailed(f"HTTP {exc.code}" + (f": {text}" if text else ""),
                         retry_after=_retry_after(exc.headers.get("Retry-After"))) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SendFailed(f"{type(exc).__name__}: {reason}") from None


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: the backoff decides


STATUS_MARK = {"firing": ":red_circle: FIRING", "resolved": ":large_green_circle: RESOLVED",
               "test": ":large_blue_circle: TEST"}


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(body: dict[str, Any]) -> dict[str, Any]:
    """An incoming webhook's message: one line of status, rule and summary, the link, and
    the message's id (Slack keeps no idempotency of its own: a repeat shows the same id)."""
    mark = STATUS_MARK.get(str(body.get("status")), str(body.get("status")))
    line = (f"{mark} *{_slack_escape(str(body.get('rule')))}* "
            f"({_slack_escape(str(body.get('condition')))}): "
            f"{_slack_escape(str(body.get('summary')))}")
    if body.get("url"):
        line += f" <{body['url']}|open in the console>"
    return {"text": line, "blocks": [
        {"type": "section", "text": {"type": "mrkdwn", "text": line}},
        {"type": "context", "elements": [
            {"type": "mrkdwn", "text": f"queueadmin alert id {body.get('id')}"}]}]}


def email_text(body: dict[str, Any]) -> tuple[str, str]:
    """(subject, plain text) of a message."""
    status = str(body.get("status", "")).upper()
    subject = f"[queueadmin] {status}: {body.get('rule')} - {body.get('summary')}"
    lines = [f"{status}: {body.get('summary')}", "",
             f"rule:       {body.get('rule')} ({body.get('condition')})",
             f"subject:    {body.get('subject')}"]
    if body.get("count") is not None:
        lines.append(f"count:      {body['count']:,}")
    for name in ("started_at", "resolved_at", "at"):
        if body.get(name):
            lines.append(f"{name + ':':<12}{body[name]}")
    if body.get("url"):
        lines += ["", f"Open in the console: {body['url']}"]
    lines += ["", f"alert id {body.get('id')} (a repeat of this message has the same id)"]
    return " ".join(subject.split())[:200], "\n".join(lines) + "\n"


def _email(channel: AlertChannel, d: Delivery) -> str:
    import smtplib

    from django.conf import settings
    from django.core.mail import EmailMessage, get_connection

    subject, text = email_text(d.body)
    msg = EmailMessage(subject, text, settings.DEFAULT_FROM_EMAIL, [channel.target], headers={
        "Message-ID": f"<{d.key}@queueadmin>", "X-Queueadmin-Id": d.key})
    try:
        sent = get_connection(timeout=timeout_s()).send_messages([msg])
    except (smtplib.SMTPException, OSError) as exc:
        raise SendFailed(f"{type(exc).__name__}: {exc}") from None
    if not sent:
        raise SendFailed("the email backend sent nothing")
    return f"mail accepted by {settings.EMAIL_HOST}:{settings.EMAIL_PORT}"

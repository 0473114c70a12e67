"""Alerts (issue 36): the rules, the channels they notify, what each rule's condition last said
about each thing it watches (an incident), and the outbox of messages to send.

Rules and channels are written by core.ops.alerts (admins, audited); incidents and messages by
core.alerts (the services process). A message is sent from its outbox row by the sender, and
its row's `key` is the idempotency id a receiver sees on every attempt (docs/alerts.md).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django.db import models

CHANNEL_KINDS = ("webhook", "slack", "email")
INCIDENT_STATUSES = ("pending", "firing", "resolved")  # pending: held, not yet for `for_s`
MESSAGE_STATUSES = ("firing", "resolved", "test")  # what a message says
DELIVERIES = ("pending", "sending", "sent", "failed")  # where its row stands


class AlertChannel(models.Model):
    """Where messages go: a Slack incoming webhook, an email address (Django's email backend),
    or a generic webhook whose JSON body is signed with `secret` (HMAC-SHA256)."""

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=10, choices=[(k, k) for k in CHANNEL_KINDS])
    target = models.CharField(max_length=500)  # the URL, or the email address
    secret = models.CharField(max_length=200, default="", blank=True)  # webhook only
    # The channel's rate limit: at most this many messages a minute; more wait their turn.
    max_per_minute = models.PositiveIntegerField(default=20)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, default="")

    def __str__(self) -> str:
        return f"{self.name} ({self.kind})"

    @property
    def shown_target(self) -> str:
        """The target as pages and `alert list` show it: a webhook URL's path and query can
        hold its credentials (Slack's does), so only its scheme and host are shown."""
        target = str(self.target)
        if self.kind == "email":
            return target
        scheme, _, rest = target.partition("://")
        host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        return f"{scheme}://{host}/…" if rest[len(host):].strip("/") else f"{scheme}://{host}"


class AlertRule(models.Model):
    """A condition (core.alerts.conditions), its scope and thresholds, and who to tell."""

    name = models.CharField(max_length=100, unique=True)
    condition = models.CharField(max_length=30)
    # Scope: "" is every queue / any handler / any tenant / any data job.
    queue = models.CharField(max_length=200, default="", blank=True)
    handler = models.CharField(max_length=200, default="", blank=True)
    tenant = models.CharField(max_length=200, default="", blank=True)
    job = models.CharField(max_length=200, default="", blank=True)
    threshold = models.FloatField(null=True, blank=True)  # None: the condition's default
    factor = models.FloatField(null=True, blank=True)  # datajob-slow's "k times its usual"
    for_s = models.PositiveIntegerField(default=0)  # held this long before it fires
    quiet_s = models.PositiveIntegerField(default=3600)  # see docs/alerts.md, quiet period
    max_per_hour = models.PositiveIntegerField(default=20)  # the rule's rate limit
    channels = models.ManyToManyField(AlertChannel, related_name="rules")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, default="")
    # The evaluator's own: one evaluation at a time (version), where new-fingerprint has read
    # the dead letters to (cursor), the rate limit's window, and what went wrong last.
    version = models.PositiveBigIntegerField(default=0)
    cursor = models.BigIntegerField(default=0)
    evaluated_at = models.DateTimeField(null=True, blank=True)
    window_start = models.DateTimeField(null=True, blank=True)
    window_sent = models.PositiveIntegerField(default=0)
    held_back = models.PositiveIntegerField(default=0)  # firings not sent: over the limit
    error = models.TextField(default="", blank=True)

    class Meta:
        # Granted to the admin group by migration 0019.
        permissions = [("manage_alerts", "Can manage alert rules and channels")]

    def __str__(self) -> str:
        return f"{self.name} ({self.condition})"

    @property
    def scope(self) -> dict[str, str]:
        return {k: v for k, v in (("queue", self.queue), ("handler", self.handler),
                                  ("tenant", self.tenant), ("job", self.job)) if v}


class AlertIncident(models.Model):
    """What one rule's condition says about one subject (a queue, a handler of a queue, a
    fingerprint, a schedule, a data job...): pending while it has held for less than the
    rule's `for_s`, firing once it has (and its message is queued), resolved when it stops
    holding (and its recovery message is queued). One open incident per rule and subject."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="incidents")
    subject = models.CharField(max_length=400)
    status = models.CharField(max_length=10, choices=[(s, s) for s in INCIDENT_STATUSES])
    started_at = models.DateTimeField()  # the condition first held
    seen_at = models.DateTimeField()  # it last held (new-fingerprint: the last letter's)
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    notified = models.BooleanField(default=False)  # its firing message was queued
    count = models.BigIntegerField(default=0)  # occurrences so far (dead letters, ...)
    value = models.FloatField(null=True, blank=True)  # what was measured (seconds, ...)
    summary = models.TextField(default="")
    recovery = models.TextField(default="", blank=True)  # what its recovery message says
    url = models.CharField(max_length=500, default="", blank=True)
    details = models.JSONField(default=dict)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["rule", "subject"], name="alert_incident_open",
                                    condition=~models.Q(status="resolved")),
        ]
        indexes = [models.Index(fields=["status", "rule"], name="alert_incident_status")]

    def __str__(self) -> str:
        return f"{self.rule_id}:{self.subject} ({self.status})"


class AlertMessage(models.Model):
    """The outbox: one message to one channel. Written in the transaction that changes the
    incident it tells of; sent by core.alerts.sender, which moves `delivery` pending ->
    sending -> sent (or back to pending, with a later `due_at`, after a failure; failed once
    it gives up), each move one atomic UPDATE. `key` is the same on every attempt."""

    key = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    channel = models.ForeignKey(AlertChannel, null=True, on_delete=models.SET_NULL,
                                related_name="messages")
    channel_name = models.CharField(max_length=100)
    rule = models.ForeignKey(AlertRule, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="messages")
    incident = models.ForeignKey(AlertIncident, null=True, blank=True,
                                 on_delete=models.SET_NULL, related_name="messages")
    status = models.CharField(max_length=10, choices=[(s, s) for s in MESSAGE_STATUSES])
    body = models.JSONField(default=dict)  # the webhook's body, less its `id` (the key)
    delivery = models.CharField(max_length=10, default="pending",
                                choices=[(d, d) for d in DELIVERIES])
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    due_at = models.DateTimeField()  # its next attempt, not before
    claim = models.CharField(max_length=64, default="", blank=True)  # the sending attempt's
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    response = models.CharField(max_length=200, default="", blank=True)  # "HTTP 200", ...
    error = models.TextField(default="", blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["delivery", "due_at"], name="alert_message_due"),
            models.Index(fields=["channel", "sent_at"], name="alert_message_channel"),
            models.Index(fields=["created_at"], name="alert_message_created"),
        ]

    def __str__(self) -> str:
        return f"{self.key} {self.status} -> {self.channel_name} ({self.delivery})"


def message_body(
    *, rule: str, condition: str, status: str, summary: str, url: str, subject: str = "",
    scope: dict[str, str] | None = None, details: dict[str, Any] | None = None,
    count: int | None = None, started_at: dt.datetime | None = None,
    resolved_at: dt.datetime | None = None, at: dt.datetime,
) -> dict[str, Any]:
    """A message's body as every channel gets it (the webhook's JSON, less its `id`: each
    outbox row's own key, added when it is sent). docs/alerts.md documents its fields."""
    def iso(t: dt.datetime | None) -> str | None:
        return t.isoformat().replace("+00:00", "Z") if t is not None else None

    return {"rule": rule, "condition": condition, "status": status, "summary": summary,
            "url": url, "subject": subject, "scope": scope or {}, "count": count,
            "details": details or {}, "started_at": iso(started_at),
            "resolved_at": iso(resolved_at), "at": iso(at)}

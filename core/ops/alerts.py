"""Alert rules and channels (issue 36), for the console's Alerts page and `manage.py alert`:
each call checks core.manage_alerts (the admin group's), validates what it is given (BadInput
saying what to write instead), and writes one audit entry, a refusal or bad input too. A
channel's test is queued in the outbox like any message (the caller may then send it at once:
core.alerts.sender.send_now). The rules' evaluation and the sending are core.alerts'."""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from core.models import AlertChannel, AlertIncident, AlertMessage, AlertRule
from core.models.alert_conditions import BadTerm, condition, parse_duration, parse_threshold
from core.models.alerts import message_body
from core.queue import InvalidInput
from core.queue.keys import validate_id

from . import audit
from .actions import check_permission
from .audit import Actor, as_actor
from .errors import BadInput, NotFound

T = TypeVar("T")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_URL = re.compile(r"https?://[^\s/?#@]+(?:/[^\s]*)?", re.I)
SECRET_MIN = 16
MAX_PER_HOUR, MAX_PER_MINUTE = 1000, 600
SHOWN_MESSAGES = 50


def _printable(text: str) -> str:
    """What the audit log keeps of a name as given: a control character (a NUL, which
    PostgreSQL refuses in text) as "?"."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)


def _no_control(values: dict[str, str | None]) -> None:
    for what, value in values.items():
        if value is not None and not str(value).isprintable():
            raise BadInput(f"{what} holds a control character (a NUL, a newline...): write it "
                           "without one")


def _act(actor: Actor, action: str, queue: str, target: str, fn: Callable[[], T]) -> T:
    queue, target = _printable(queue), _printable(target)
    check_permission(actor, action, queue[:200], target[:2000], 1)
    try:
        with transaction.atomic():
            result = fn()
    except BadInput as exc:
        audit.record(actor, action, queue[:200], target=target[:2000], count=1,
                     error=str(exc)[:500])
        raise
    audit.record(actor, action, queue[:200], target=target[:2000], count=1, acted=1)
    return result


def _name(name: str, what: str) -> str:
    name = str(name).strip()
    if not _NAME.fullmatch(name):
        raise BadInput(f"{what} name {name[:60]!r} is not one: 1 to 100 letters, digits, '.', "
                       "'_' or '-', starting with a letter or digit")
    return name


@dataclass(frozen=True)
class ChannelAdded:
    channel: AlertChannel
    secret: str  # a webhook's secret when it was made here (shown once), else ""


def add_channel(who: Any, name: str, *, webhook: str | None = None, slack: str | None = None,
                email: str | None = None, secret: str | None = None,
                max_per_minute: int | None = None) -> ChannelAdded:
    """A channel: one of `webhook` (signed with `secret`, made here when not given), `slack`
    (an incoming webhook's URL) or `email` (an address)."""
    actor = as_actor(who)
    given = {k: v for k, v in (("webhook", webhook), ("slack", slack), ("email", email))
             if v is not None}
    kind = next(iter(given), "")
    target = f"alert channel {str(name)[:100]} ({kind or 'no kind'})"

    def make() -> ChannelAdded:
        checked = _name(name, "channel")
        _no_control({f"--{kind or 'webhook'}": given.get(kind), "--secret": secret})
        if len(given) != 1:
            raise BadInput("give a channel one of --webhook URL, --slack URL or --email ADDRESS")
        where = _target(kind, str(given[kind]).strip())
        made = ""
        if secret is not None and kind != "webhook":
            raise BadInput("--secret goes with --webhook (a Slack or email channel signs nothing)")
        if kind == "webhook":
            made = "" if secret else secrets.token_urlsafe(32)
            if secret is not None and not SECRET_MIN <= len(secret) <= 200:
                raise BadInput(f"the webhook's secret must be {SECRET_MIN} to 200 characters "
                               "(leave --secret out and one is made)")
        rate = _between(max_per_minute, "messages a minute", 1, MAX_PER_MINUTE, 20)
        if AlertChannel.objects.filter(name=checked).exists():
            raise BadInput(f"there is already a channel named {checked}: remove it first, or "
                           "pick another name")
        ch = AlertChannel.objects.create(name=checked, kind=kind, target=where,
                                         secret=secret or made, max_per_minute=rate,
                                         created_by=actor.name[:200])
        return ChannelAdded(ch, made)

    return _act(actor, "alert-channel-add", "", target, make)


def _target(kind: str, value: str) -> str:
    if kind == "email":
        try:
            validate_email(value)
        except ValidationError:
            raise BadInput(f"{value[:100]!r} is not an email address") from None
        return value
    if len(value) > 500 or not _URL.fullmatch(value):
        raise BadInput(f"--{kind} {value[:100]!r} is not an http:// or https:// URL (at most "
                       "500 characters)")
    return value


def _between(value: int | None, what: str, low: int, high: int, default: int) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or not low <= value <= high:
        raise BadInput(f"{what}: {value!r} is not a whole number from {low} to {high}")
    return value


def remove_channel(who: Any, name: str) -> None:
    """Remove a channel no rule sends to (its messages not sent yet are given up)."""
    actor = as_actor(who)

    def remove() -> None:
        ch = channel_named(name)
        users = sorted(ch.rules.values_list("name", flat=True))
        if users:
            raise BadInput(f"channel {ch.name} is a channel of the rules {', '.join(users)}: "
                           "remove them (or this channel from them) first")
        ch.delete()

    _act(actor, "alert-channel-remove", "", f"alert channel {str(name)[:100]}", remove)


def channel_named(name: str) -> AlertChannel:
    """The channel `name`; BadInput naming the channels there are if none."""
    ch = (AlertChannel.objects.filter(name=str(name).strip()).first()
          if _NAME.fullmatch(str(name).strip()) else None)  # no name is sent to the database
    if ch is None:
        known = ", ".join(AlertChannel.objects.order_by("name").values_list("name", flat=True))
        raise NotFound(f"there is no alert channel named {str(name)[:100]!r} (there are: "
                       f"{known or 'none yet'})")
    return ch


def test_channel(who: Any, name: str) -> AlertMessage:
    """Queue a test message to the channel; send it at once with sender.send_now()."""
    actor = as_actor(who)

    def queue() -> AlertMessage:
        from django.conf import settings
        from django.urls import reverse

        ch = channel_named(name)
        now = timezone.now()
        body = message_body(
            rule="(test)", condition="test", status="test", subject=f"channel/{ch.name}",
            summary=f"a test of alert channel {ch.name}, asked by {actor.name}: alerts reach "
                    "you here", url=f"{settings.CONSOLE_URL}{reverse('core:alerts')}", at=now)
        return AlertMessage.objects.create(channel=ch, channel_name=ch.name, status="test",
                                           body=body, created_at=now, due_at=now)

    return _act(actor, "alert-channel-test", "", f"alert channel {str(name)[:100]}", queue)


@dataclass(frozen=True)
class RuleSpec:
    """A rule as given (text, as typed on the form or the command line)."""

    name: str
    when: str
    channels: Sequence[str] = ()
    queue: str = ""
    handler: str = ""
    tenant: str = ""
    job: str = ""
    threshold: str = ""
    for_: str = ""
    quiet: str = ""
    max_per_hour: int | None = None


def add_rule(who: Any, spec: RuleSpec) -> AlertRule:
    actor = as_actor(who)
    target = f"alert rule {str(spec.name)[:100]}: {str(spec.when)[:40]}"
    return _act(actor, "alert-rule-add", str(spec.queue or ""), target,
                lambda: _make_rule(actor, spec))


def _make_rule(actor: Actor, spec: RuleSpec) -> AlertRule:
    name = _name(spec.name, "rule")
    try:
        c = condition(spec.when)
        threshold, factor = parse_threshold(c, spec.threshold)
        for_s = parse_duration(spec.for_, "--for") if str(spec.for_).strip() else c.for_s
        quiet_s = parse_duration(spec.quiet, "--quiet") if str(spec.quiet).strip() else c.quiet_s
    except BadTerm as exc:
        raise BadInput(str(exc)) from None
    scope = {k: str(v).strip() for k, v in (("queue", spec.queue), ("handler", spec.handler),
                                            ("tenant", spec.tenant), ("job", spec.job)) if v}
    for k in scope.keys() - set(c.scopes):
        takes = ", ".join(f"--{s}" for s in c.scopes) or "no scope"
        raise BadInput(f"{c.name} is not narrowed by --{k}: it takes {takes}")
    try:
        for k, what in (("queue", "queue name"), ("handler", "handler name")):
            if k in scope:
                validate_id(scope[k], what)
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None
    _no_control({f"--{k}": v for k, v in scope.items()})
    if any(len(v) > 200 for v in scope.values()):
        raise BadInput("a scope (--tenant, --job) is at most 200 characters")
    chans = _channels_of(spec.channels)
    if AlertRule.objects.filter(name=name).exists():
        raise BadInput(f"there is already a rule named {name}: remove it first, or pick "
                       "another name")
    rate = _between(spec.max_per_hour, "messages an hour", 1, MAX_PER_HOUR, 20)
    try:
        rule = AlertRule.objects.create(
            name=name, condition=c.name, threshold=threshold, factor=factor, for_s=for_s,
            quiet_s=quiet_s, max_per_hour=rate, created_by=actor.name[:200], **scope)
    except IntegrityError:
        raise BadInput(f"there is already a rule named {name}") from None
    rule.channels.set(chans)
    return rule


def _channels_of(names: Sequence[str]) -> list[AlertChannel]:
    wanted = list(dict.fromkeys(str(n).strip() for n in names if str(n).strip()))
    if not wanted:
        raise BadInput("give a rule at least one channel (--channel NAME; `alert channel add` "
                       "makes one)")
    try:
        return [channel_named(n) for n in wanted]
    except NotFound as exc:  # a rule naming a channel that is not there: its input is wrong
        raise BadInput(str(exc)) from None


def rule_named(name: str) -> AlertRule:
    """The rule `name`; BadInput if none."""
    rule = (AlertRule.objects.filter(name=str(name).strip()).first()
            if _NAME.fullmatch(str(name).strip()) else None)
    if rule is None:
        raise NotFound(f"there is no alert rule named {str(name)[:100]!r}")
    return rule


def remove_rule(who: Any, name: str) -> None:
    """Remove a rule, its incidents with it; its messages not yet sent still go."""
    actor = as_actor(who)
    _act(actor, "alert-rule-remove", "", f"alert rule {str(name)[:100]}",
         lambda: rule_named(name).delete())


def enable_rule(who: Any, name: str, enabled: bool) -> bool:
    """Turn a rule on or off; whether that changed anything. Off, its open incidents close
    without a message; on again, it looks at what happened in its last quiet period."""
    actor = as_actor(who)
    action = "alert-rule-enable" if enabled else "alert-rule-disable"

    def change() -> bool:
        rule = rule_named(name)
        if rule.enabled == enabled:
            return False
        AlertRule.objects.filter(pk=rule.pk).update(enabled=enabled, cursor=0)
        if not enabled:
            rule.incidents.exclude(status="resolved").update(status="resolved",
                                                             resolved_at=timezone.now())
        return True

    return _act(actor, action, "", f"alert rule {str(name)[:100]}", change)


@dataclass
class Listing:
    channels: list[AlertChannel]
    rules: list[AlertRule]
    incidents: list[AlertIncident]  # open ones, firing first
    deliveries: dict[str, int] = field(default_factory=dict)  # outbox rows by delivery
    messages: list[AlertMessage] = field(default_factory=list)  # the last ones


def listing(*, messages: int = SHOWN_MESSAGES) -> Listing:
    """What `alert list` and the Alerts page show (a read: no permission, no audit)."""
    return Listing(
        channels=list(AlertChannel.objects.annotate(n_rules=Count("rules")).order_by("name")),
        rules=list(AlertRule.objects.prefetch_related("channels").order_by("name")),
        incidents=list(AlertIncident.objects.exclude(status="resolved").select_related("rule")
                       .order_by("status", "-started_at")[:500]),
        deliveries=dict(AlertMessage.objects.values_list("delivery").annotate(n=Count("pk"))
                        .values_list("delivery", "n")),
        messages=list(AlertMessage.objects.order_by("-pk")[:messages]))

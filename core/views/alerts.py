"""Alerts (issue 36), for admins (core.manage_alerts): the incidents open now, the rules with
a form to add one, the channels with "Send a test" each, and the outbox's last messages.
Every change is a POST through core.ops.alerts (permission, audit); removing a rule or a
channel asks first. A channel's test is sent while the page waits (through the outbox's claim:
the services process never sends it too), and the page says what the receiver answered."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from core.console.queues import queue_from
from core.models.alert_conditions import CONDITIONS, describe_threshold, format_duration
from core.models.alerts import CHANNEL_KINDS
from core.ops import alerts as ops
from core.ops.audit import as_actor
from core.ops.errors import BadInput, Refused

from .common import PERMISSION, console_page, page

MANAGE = "core.manage_alerts"
RULE_FIELDS = ("name", "when", "queue", "handler", "tenant", "job", "threshold", "for_",
               "quiet", "max_per_hour")
CHANNEL_FIELDS = ("name", "kind", "target", "secret", "max_per_minute")
RULE_ACTIONS = ("enable", "disable", "remove")
CHANNEL_ACTIONS = ("test", "remove")


def _context(**extra: Any) -> dict[str, Any]:
    got = ops.listing()
    rules = [{"rule": r, "threshold": _threshold(r), "for": format_duration(r.for_s),
              "quiet": format_duration(r.quiet_s),
              "channels": sorted(c.name for c in r.channels.all())}  # any order in the database
             for r in got.rules]
    return {"listing": got, "rules": rules, "conditions": CONDITIONS.values(),
            "kinds": CHANNEL_KINDS, "rule_form": {"max_per_hour": ""},
            "channel_form": {"kind": "webhook"}, **extra}


def _threshold(rule: Any) -> str:
    c = CONDITIONS.get(rule.condition)
    return describe_threshold(c, rule.threshold, rule.factor) if c else ""


def _page(request: HttpRequest, *, status: int = 200, **extra: Any) -> HttpResponse:
    queue = queue_from(request)
    live = status == 200 and not extra
    return page(request, "core/alerts.html", queue, _context(**extra), nav="alerts",
                status=status, live=live)


def _back(request: HttpRequest) -> HttpResponseRedirect:
    queue = str(request.GET.get("queue", ""))[:200]
    suffix = f"?{urlencode({'queue': queue})}" if queue else ""
    return HttpResponseRedirect(f"{reverse('core:alerts')}{suffix}")


@console_page
def alert_list(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm(MANAGE):
        raise PermissionDenied("the Alerts page is for admins (core.manage_alerts)")
    return _page(request)


def _posted(request: HttpRequest, fields: tuple[str, ...]) -> dict[str, str]:
    return {f: str(request.POST.get(f, "")).strip()[:600] for f in fields}


def _whole(text: str, what: str) -> int | None:
    if not text:
        return None
    if not text.isascii() or not text.isdecimal() or len(text) > 6:
        raise BadInput(f"{what}: {text[:20]!r} is not a whole number")
    return int(text)


@require_POST
def rule_add(request: HttpRequest) -> HttpResponse:
    form = _posted(request, RULE_FIELDS)
    chans = [str(c)[:100] for c in request.POST.getlist("channels")][:50]
    try:
        spec = ops.RuleSpec(
            name=form["name"], when=form["when"], channels=chans, queue=form["queue"],
            handler=form["handler"], tenant=form["tenant"], job=form["job"],
            threshold=form["threshold"], for_=form["for_"], quiet=form["quiet"],
            max_per_hour=_whole(form["max_per_hour"], "messages an hour"))
        rule = ops.add_rule(as_actor(request.user), spec)
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    except BadInput as exc:
        _may_see(request)
        return _page(request, status=400, rule_form={**form, "channels": chans},
                     rule_error=str(exc))
    messages.success(request, f"Added rule {rule.name}.")
    return _back(request)


@require_POST
def channel_add(request: HttpRequest) -> HttpResponse:
    form = _posted(request, CHANNEL_FIELDS)
    kind = form["kind"] if form["kind"] in CHANNEL_KINDS else "webhook"
    try:
        added = ops.add_channel(
            as_actor(request.user), form["name"], **{kind: form["target"]},
            secret=form["secret"] or None,
            max_per_minute=_whole(form["max_per_minute"], "messages a minute"))
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    except BadInput as exc:
        _may_see(request)
        return _page(request, status=400, channel_form={**form, "secret": ""},
                     channel_error=str(exc))
    said = f"Added channel {added.channel.name}."
    if added.secret:
        said += (f" Its signing secret, for the receiver (it is not shown again): "
                 f"{added.secret}")
    messages.success(request, said)
    return _back(request)


def _may_see(request: HttpRequest) -> None:
    """The page is shown again only to who may see it (ops has refused the others)."""
    if not request.user.has_perm(PERMISSION) or not request.user.has_perm(MANAGE):
        raise PermissionDenied


def rule_act(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """POST enable, disable, remove (remove: the first POST, without `confirm`, asks)."""
    if action not in RULE_ACTIONS:
        raise Http404(f"No alert rule action {action!r}.")
    if request.method != "POST":
        return HttpResponse(status=405, headers={"Allow": "POST"})
    actor = as_actor(request.user)
    try:
        if action == "remove" and request.POST.get("confirm") != "yes":
            _may_see(request)
            rule = ops.rule_named(name)
            return _page(request, confirm={"kind": "rule", "name": rule.name,
                                           "incidents": rule.incidents.exclude(
                                               status="resolved").count()})
        if action == "remove":
            ops.remove_rule(actor, name)
            messages.success(request, f"Removed rule {name}.")
        else:
            changed = ops.enable_rule(actor, name, action == "enable")
            messages.success(request, f"Rule {name} {action}d." if changed
                             else f"Rule {name} was already {action}d: nothing changed.")
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    except BadInput as exc:
        messages.error(request, str(exc))
    return _back(request)


def channel_act(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """POST test (sent now; the page says what came of it), remove (asks first)."""
    from core.alerts.sender import send_now

    if action not in CHANNEL_ACTIONS:
        raise Http404(f"No alert channel action {action!r}.")
    if request.method != "POST":
        return HttpResponse(status=405, headers={"Allow": "POST"})
    actor = as_actor(request.user)
    try:
        if action == "remove" and request.POST.get("confirm") != "yes":
            _may_see(request)
            ch = ops.channel_named(name)
            return _page(request, confirm={"kind": "channel", "name": ch.name,
                                           "rules": list(ch.rules.values_list("name",
                                                                              flat=True))})
        if action == "remove":
            ops.remove_channel(actor, name)
            messages.success(request, f"Removed channel {name}.")
        else:
            m = send_now(ops.test_channel(actor, name).pk)
            if m.delivery == "sent":
                messages.success(request, f"Test sent to {name}: {m.response} (alert id "
                                          f"{m.key}).")
            else:
                messages.error(request, f"The test to {name} failed: {m.error or m.delivery} "
                                        f"(alert id {m.key}).")
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    except BadInput as exc:
        messages.error(request, str(exc))
    return _back(request)

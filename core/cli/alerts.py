"""`manage.py alert channel add|test|remove`, `alert rule add|remove|enable|disable`, `alert
list`: the alert rules and channels at the command line, through the same service layer
(permission, audit, checks) as the console's Alerts page."""

from __future__ import annotations

from typing import TextIO

from django.core.management.base import CommandError

from core.models import AlertRule
from core.models.alert_conditions import CONDITIONS, describe_threshold, format_duration
from core.ops import alerts as ops
from core.ops.audit import Actor, os_actor

from .ops import ops_errors


def channel_add(name: str, *, out: TextIO, webhook: str | None = None,
                slack: str | None = None, email: str | None = None, secret: str | None = None,
                max_per_minute: int | None = None, actor: Actor | None = None) -> None:
    with ops_errors("alert channel add"):
        from core.ops.audit import require_log

        require_log()
        added = ops.add_channel(actor or os_actor(), name, webhook=webhook, slack=slack,
                                email=email, secret=secret, max_per_minute=max_per_minute)
    ch = added.channel
    out.write(f"added {ch.kind} channel {ch.name}: {ch.shown_target}\n")
    if added.secret:
        out.write(f"its signing secret (give it to the receiver; it is not shown again): "
                  f"{added.secret}\n")


def channel_test(name: str, *, out: TextIO, actor: Actor | None = None) -> None:
    """Queue a test message to the channel and send it now; CommandError if it failed."""
    from core.alerts.sender import send_now

    with ops_errors("alert channel test"):
        from core.ops.audit import require_log

        require_log()
        queued = ops.test_channel(actor or os_actor(), name)
    m = send_now(queued.pk)
    if m.delivery != "sent":
        raise CommandError(f"alert channel test: the test to {name} failed: "
                           f"{m.error or m.delivery} (alert id {m.key})")
    out.write(f"test sent to {name}: {m.response} (alert id {m.key})\n")


def channel_remove(name: str, *, out: TextIO, actor: Actor | None = None) -> None:
    with ops_errors("alert channel remove"):
        ops.remove_channel(actor or os_actor(), name)
    out.write(f"removed channel {name}\n")


def rule_add(spec: ops.RuleSpec, *, out: TextIO, actor: Actor | None = None) -> None:
    with ops_errors("alert rule add"):
        from core.ops.audit import require_log

        require_log()
        rule = ops.add_rule(actor or os_actor(), spec)
    out.write(f"added rule {rule.name}: {describe(rule)}\n")


def rule_change(action: str, name: str, *, out: TextIO, actor: Actor | None = None) -> None:
    with ops_errors(f"alert rule {action}"):
        if action == "remove":
            ops.remove_rule(actor or os_actor(), name)
            out.write(f"removed rule {name}\n")
            return
        changed = ops.enable_rule(actor or os_actor(), name, action == "enable")
    out.write(f"rule {name} {action}d\n" if changed else
              f"rule {name} was already {action}d: nothing changed\n")


def describe(rule: AlertRule) -> str:
    """A rule in one line: its condition, scope, threshold, for, quiet, channels."""
    c = CONDITIONS.get(rule.condition)
    parts = [rule.condition]
    parts += [f"{k} {v}" for k, v in rule.scope.items()]
    if c is not None and (t := describe_threshold(c, rule.threshold, rule.factor)):
        parts.append(f"threshold {t}")
    if rule.for_s:
        parts.append(f"for {format_duration(rule.for_s)}")
    parts.append(f"quiet {format_duration(rule.quiet_s)}")
    parts.append(f"at most {rule.max_per_hour}/h")
    parts.append("to " + ", ".join(sorted(ch.name for ch in rule.channels.all())))
    if not rule.enabled:
        parts.append("(disabled)")
    return "; ".join(parts)


def listing(*, out: TextIO) -> ops.Listing:
    with ops_errors("alert list"):
        got = ops.listing(messages=10)
    out.write(f"channels ({len(got.channels)}):\n")
    for ch in got.channels:
        out.write(f"  {ch.name:<20} {ch.kind:<8} {ch.shown_target}  max {ch.max_per_minute}/min\n")
    out.write(f"rules ({len(got.rules)}):\n")
    for rule in got.rules:
        error = f"\n    last error: {rule.error}" if rule.error else ""
        out.write(f"  {rule.name:<20} {describe(rule)}{error}\n")
    out.write(f"open incidents ({len(got.incidents)}):\n")
    for inc in got.incidents:
        told = "" if inc.notified or inc.status != "firing" else " (not told yet)"
        out.write(f"  {inc.status:<8} {inc.rule.name}: {inc.summary}{told}\n")
    counts = ", ".join(f"{n:,} {d}" for d, n in sorted(got.deliveries.items())) or "empty"
    out.write(f"outbox: {counts}\n")
    return got


def prometheus(out_dir: str, *, out: TextIO, metrics: str | None, rules_file: str,
               dashboard_file: str) -> None:
    """Write the Prometheus rules and the Grafana dashboard generated from /metrics (this
    installation's, or a saved text) into `out_dir`; say what was left out and why."""
    from pathlib import Path

    from core.console import prometheus as prom

    if metrics:
        try:
            text = Path(metrics).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"alert prometheus: cannot read {metrics}: {exc}") from None
    else:
        text = prom.local_metrics()
    fams = prom.families(text)
    if not any(name.startswith("queueadmin_") for name in fams):
        raise CommandError("alert prometheus: no queueadmin metric in that text (is it "
                           "queueadmin's /metrics?)")
    where = Path(out_dir)
    try:
        where.mkdir(parents=True, exist_ok=True)
        (where / rules_file).write_text(prom.rules_yaml(fams))
        (where / dashboard_file).write_text(prom.dashboard_json(fams))
    except OSError as exc:
        raise CommandError(f"alert prometheus: cannot write into {out_dir}: {exc}") from None
    kept, left = prom.rules(fams)
    out.write(f"wrote {where / rules_file} ({len(kept)} rules) and {where / dashboard_file} "
              f"({len(fams)} panels)\n")
    for condition, why in sorted(left.items()):
        out.write(f"  not expressed: {condition}: {why}\n")

"""Incidents from what the conditions find, and their messages into the outbox.

For each enabled rule, each pass: its condition says what holds now (core.alerts.engine,
core.alerts.history); a subject that starts to hold opens a pending incident, which fires once
it has held for the rule's `for_s` (an event condition fires at once); a firing incident is
told to the rule's channels, unless the rule's rate limit or its quiet period holds it back
(it is told when they allow, if it still holds); one that no longer holds resolves, and if it
was told, its recovery message goes out too. What a condition cannot tell (Redis does not
answer) changes nothing.

A rule's pass writes in one transaction, guarded by the rule's version: its incidents and
their messages are written together or not at all, and two services processes evaluating the
same rule at once write one pass of it, not two (no message twice).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from django.db import transaction
from django.db.models import F

from core.models import AlertIncident, AlertMessage, AlertRule
from core.models.alert_conditions import CONDITIONS, Condition
from core.models.alerts import message_body

from . import engine, history
from .look import Finding, Look, Outcome, Unknown

log = logging.getLogger("queueadmin.alerts")
WINDOW = dt.timedelta(hours=1)  # a rule's rate limit counts its messages per hour

Check = Callable[[AlertRule, Look, dict[str, AlertIncident]], Outcome]
CHECKS: dict[str, Check] = {
    **history.CHECKS,
    "no-live-worker": engine.no_live_worker, "waiting-age": engine.waiting_age,
    "request-overdue": engine.request_overdue, "worker-lost": engine.worker_lost,
    "expired-leases": engine.expired_leases, "schedule-late": engine.schedule_late,
    "redis-down": engine.redis_down, "redis-memory": engine.redis_memory,
    "redis-aof": engine.redis_aof, "mirror-lag": engine.mirror_lag,
}
assert set(CHECKS) == set(CONDITIONS), "every condition has its check"


@dataclass
class Pass:
    """What one pass did (the loop logs it; tests and the benchmark read it)."""

    rules: int = 0
    fired: int = 0
    resolved: int = 0
    messages: int = 0  # outbox rows written
    unknown: int = 0  # rules whose condition could not be told
    errors: int = 0


def evaluate_all(*, now: dt.datetime | None = None,
                 queued: Callable[[], None] | None = None) -> Pass:
    """One pass over every enabled rule. A rule that fails is logged and its error kept on
    it (the Alerts page shows it); the others are evaluated all the same. `queued` is called
    as soon as a rule's messages are in the outbox (committed), so that the sender need not
    wait for the rest of the pass."""
    look, done = Look(now), Pass()
    for rule in AlertRule.objects.filter(enabled=True).order_by("pk"):
        done.rules += 1
        before = done.messages
        try:
            evaluate(rule, look, done)
            if queued is not None and done.messages > before:
                queued()
        except Exception as exc:  # one rule's bug or bad data must not silence the others
            done.errors += 1
            log.exception("alert rule %s: its evaluation failed", rule.name)
            AlertRule.objects.filter(pk=rule.pk).update(error=f"{type(exc).__name__}: {exc}"[:2000])
    return done


def evaluate(rule: AlertRule, look: Look, done: Pass) -> None:
    cond = CONDITIONS[rule.condition]
    open_ = {i.subject: i for i in rule.incidents.exclude(status="resolved")}
    try:
        outcome = CHECKS[rule.condition](rule, look, open_)
    except Unknown:
        done.unknown += 1
        return
    with transaction.atomic():
        cursor = outcome.cursor if outcome.cursor is not None else rule.cursor
        won = AlertRule.objects.filter(pk=rule.pk, version=rule.version).update(
            version=F("version") + 1, evaluated_at=look.now, error="", cursor=cursor)
        if not won:
            return  # another evaluator passed over this rule meanwhile: its pass stands
        rule.version += 1
        found = {f.subject: f for f in outcome.found}
        held = [_held(rule, cond, open_.get(f.subject), f, look.now, done)
                for f in found.values()]
        for subject, inc in open_.items():
            if subject not in found:
                _gone(rule, inc, outcome.why_resolved.get(subject) or inc.recovery, look.now,
                      done)
        for inc in sorted(held, key=lambda i: (i.started_at, i.pk)):
            if inc.status == "firing" and not inc.notified:
                _tell(rule, cond, inc, look.now, done)


def _held(rule: AlertRule, cond: Condition, inc: AlertIncident | None, f: Finding,
          now: dt.datetime, done: Pass) -> AlertIncident:
    if inc is None:
        inc = AlertIncident(rule=rule, subject=f.subject, status="pending",
                            started_at=f.started_at or now)
    inc.seen_at = f.seen_at or now
    inc.summary, inc.url, inc.value, inc.details = f.summary, f.url, f.value, f.details
    inc.recovery = f.resolved or inc.recovery
    inc.count = f.count if f.count is not None else 0
    held_s = (now - inc.started_at).total_seconds()
    if inc.status == "pending" and (cond.event or held_s >= rule.for_s):
        inc.status, inc.fired_at = "firing", now
        done.fired += 1
    inc.save()
    return inc


def _tell(rule: AlertRule, cond: Condition, inc: AlertIncident, now: dt.datetime,
          done: Pass) -> None:
    """Queue the firing message, unless the quiet period after this subject's last recovery
    message, or the rule's rate limit, holds it back for now."""
    if not cond.event and rule.quiet_s:
        last = (AlertIncident.objects.filter(rule=rule, subject=inc.subject, notified=True,
                                             status="resolved")
                .order_by("-resolved_at").values_list("resolved_at", flat=True).first())
        if last is not None and (now - last).total_seconds() < rule.quiet_s:
            return
    if rule.window_start is None or now - rule.window_start >= WINDOW:
        rule.window_start, rule.window_sent = now, 0
    if rule.window_sent >= rule.max_per_hour:
        waiting = rule.incidents.filter(status="firing", notified=False).count()
        AlertRule.objects.filter(pk=rule.pk).update(held_back=waiting)
        return
    waiting = rule.incidents.filter(status="firing", notified=False).exclude(pk=inc.pk).count()
    summary = inc.summary
    if waiting and rule.window_sent + 1 >= rule.max_per_hour:
        summary += (f" [{waiting:,} more incident{'s' if waiting != 1 else ''} of this rule "
                    f"wait: it sends at most {rule.max_per_hour} messages an hour; the Alerts "
                    "page lists them]")
    done.messages += queue_messages(rule, inc, "firing", summary, now)
    rule.window_sent += 1
    AlertIncident.objects.filter(pk=inc.pk).update(notified=True)
    inc.notified = True
    AlertRule.objects.filter(pk=rule.pk).update(
        window_start=rule.window_start, window_sent=rule.window_sent, held_back=waiting)


def _gone(rule: AlertRule, inc: AlertIncident, why: str, now: dt.datetime, done: Pass) -> None:
    """The incident no longer holds: resolved; its recovery message if it was told."""
    was = inc.status
    inc.status, inc.resolved_at = "resolved", now
    inc.save(update_fields=["status", "resolved_at"])
    if was == "firing":
        done.resolved += 1
        if inc.notified:  # recoveries are never held back: every told incident is closed
            done.messages += queue_messages(rule, inc, "resolved", why or "resolved", now)


def queue_messages(rule: AlertRule, inc: AlertIncident, status: str, summary: str,
                   now: dt.datetime) -> int:
    """One outbox row per channel of the rule, in the caller's transaction."""
    body = message_body(
        rule=rule.name, condition=rule.condition, status=status, summary=summary, url=inc.url,
        subject=inc.subject, scope=rule.scope, details=inc.details, count=inc.count or None,
        started_at=inc.started_at, resolved_at=inc.resolved_at, at=now)
    rows = [AlertMessage(channel=c, channel_name=c.name, rule=rule, incident=inc,
                         status=status, body=body, created_at=now, due_at=now)
            for c in rule.channels.all()]
    AlertMessage.objects.bulk_create(rows)
    return len(rows)

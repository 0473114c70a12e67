"""The conditions read from the database the mirror keeps: a new kind of dead letter (one
message per masked-error fingerprint and quiet period, the count kept up to date), dead letters
coming faster than a rate, a data job failed, a data job running long."""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any

from django.db.models import Max, Min, Q, QuerySet

from core.models import AlertIncident, AlertRule, DeadLetter, Request
from core.models.alert_conditions import CONDITIONS, format_duration
from core.pipeline.jobs import HANDLER as DATAJOB
from core.pipeline.jobs import combine_id

from .look import Finding, Look, Outcome, link

Open = dict[str, AlertIncident]
RESCAN = 1000  # letters read again below the cursor: rows of a mirror's transaction that
# committed after a later one's (several mirrors) are seen too; a fingerprint is news once
FIRST_LOOK = dt.timedelta(hours=1)  # what a new datajob-failed rule looks back on
USUAL_RUNS = 20  # the done jobs whose median is a job's usual time
USUAL_AT_LEAST = 3  # fewer done jobs: no usual time yet, the factor is not judged
PATTERN_SHOWN = 300


def _scoped(rows: QuerySet[Any], rule: AlertRule, *, job_field: str = "") -> QuerySet[Any]:
    if rule.queue:
        rows = rows.filter(queue=rule.queue)
    if rule.handler and not job_field:
        rows = rows.filter(handler=rule.handler)
    if rule.tenant:
        rows = rows.filter(tenant=rule.tenant)
    if rule.job and job_field:
        job = rule.job
        rows = rows.filter(Q(**{job_field: job}) | Q(**{job_field: combine_id(job)}))
    return rows


def new_fingerprint(rule: AlertRule, look: Look, open_: Open) -> Outcome:
    """Dead letters since the last pass grouped by (queue, fingerprint): a group with no
    open incident is news; an open one keeps its incident and its count grows. An incident
    closes when no letter of its kind came for the quiet period, or none is left dead."""
    now, quiet = look.now, dt.timedelta(seconds=rule.quiet_s)
    top = DeadLetter.objects.aggregate(m=Max("pk"))["m"] or 0
    if rule.cursor <= 0:  # a new rule: the letters of the last quiet period are news
        first = (DeadLetter.objects.filter(dead_at__gte=now - quiet).order_by("pk")
                 .values_list("pk", flat=True).first())
        start = first - 1 if first is not None else top
    else:
        start = max(0, rule.cursor - RESCAN)
    groups = (_scoped(DeadLetter.objects.filter(pk__gt=start, pk__lte=top), rule)
              .values("queue", "fingerprint").annotate(last=Max("dead_at"), first=Min("pk")))
    out = Outcome(cursor=max(top, rule.cursor))
    fresh = {f"{g['queue']}/{g['fingerprint']}": g for g in groups}
    told = _closed_after(rule, [g for s, g in fresh.items() if s not in open_])
    for subject, g in fresh.items():
        if subject not in open_ and subject not in told:
            out.found.append(_news(rule, g["first"], g["last"]))
    keep = _still_dead(rule, list(open_.values()))
    for subject, inc in open_.items():
        seen = max(inc.seen_at, fresh[subject]["last"]) if subject in fresh else inc.seen_at
        count = _count(rule, inc) if subject in fresh else inc.count
        if subject not in keep:
            out.why_resolved[subject] = (f"all {count:,} dead letters of this kind were "
                                         f"requeued or deleted: {inc.details.get('error', '')}")
        elif now - seen >= quiet:
            out.why_resolved[subject] = (
                f"no new dead letter of this kind for {format_duration(rule.quiet_s)} "
                f"({count:,} in all): {inc.details.get('error', '')}")
        else:
            out.found.append(Finding(subject, _said(inc.details, count), inc.summary, inc.url,
                                     count=count, details=inc.details, seen_at=seen))
    return out


def _news(rule: AlertRule, first_pk: int, last: dt.datetime) -> Finding:
    letter = DeadLetter.objects.get(pk=first_pk)
    error = (f"{letter.exception}: {letter.pattern}" if letter.exception
             else letter.pattern)[:PATTERN_SHOWN]
    details = {"queue": letter.queue, "fingerprint": letter.fingerprint,
               "handler": letter.handler, "exception": letter.exception, "error": error,
               "first_request": letter.request_id, "first_task": letter.task_id}
    count = _count(rule, AlertIncident(rule=rule, started_at=letter.dead_at, details=details))
    return Finding(f"{letter.queue}/{letter.fingerprint}", _said(details, count), "",
                   link("dead_group", letter.queue, letter.fingerprint), count=count,
                   details=details, started_at=letter.dead_at, seen_at=last)


def _closed_after(rule: AlertRule, groups: list[dict[str, Any]]) -> set[str]:
    """The subjects among `groups` whose last incident closed after their newest letter
    died: letters read again below the cursor, already told of."""
    last = {f"{g['queue']}/{g['fingerprint']}": g["last"] for g in groups}
    closed = (AlertIncident.objects.filter(rule=rule, status="resolved", subject__in=last)
              .values("subject").annotate(at=Max("resolved_at")))
    return {c["subject"] for c in closed if c["at"] is not None and c["at"] >= last[c["subject"]]}


def _said(details: dict[str, Any], count: int) -> str:
    return (f"new failure in queue {details.get('queue')}, handler {details.get('handler')}: "
            f"{details.get('error')} ({count:,} dead letter{'s' if count != 1 else ''} so far)")


def _count(rule: AlertRule, inc: AlertIncident) -> int:
    d = inc.details
    rows = DeadLetter.objects.filter(queue=d.get("queue"), fingerprint=d.get("fingerprint"),
                                     dead_at__gte=inc.started_at)
    return int(rows.filter(tenant=rule.tenant).count() if rule.tenant else rows.count())


def _still_dead(rule: AlertRule, incidents: list[AlertIncident]) -> set[str]:
    """The subjects among `incidents` with a letter still dead (one query)."""
    if not incidents:
        return set()
    fps = {str(i.details.get("fingerprint")) for i in incidents}
    rows = _scoped(DeadLetter.objects.filter(resolution="", fingerprint__in=fps), rule)
    return {f"{q}/{fp}" for q, fp in rows.values_list("queue", "fingerprint").distinct()}


def dead_rate(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    limit = rule.threshold if rule.threshold is not None else CONDITIONS["dead-rate"].default
    since = look.now - dt.timedelta(minutes=1)
    out = Outcome()
    for q in look.queues(rule.queue):
        rows = _scoped(DeadLetter.objects.filter(queue=q, dead_at__gte=since), rule)
        n = rows.count()
        if n <= (limit or 0):
            continue
        out.found.append(Finding(
            subject=q, value=n, count=n, url=link("dead", queue=q),
            summary=f"{n:,} dead letters in queue {q} in the last minute, over {limit:g} a "
                    "minute",
            resolved=f"queue {q}: dead letters come slower than {limit:g} a minute again",
            details={"queue": q, "per_minute": n}))
    return out


def datajob_failed(rule: AlertRule, look: Look, open_: Open) -> Outcome:
    """A data job (its chunks' request or its combine step) failed since the rule began (an
    hour before, for a new rule); it resolves once the job is no longer failed."""
    since = max(rule.created_at - FIRST_LOOK, look.now - dt.timedelta(days=7))
    out = Outcome()
    for q in look.queues(rule.queue):
        rows = _scoped(Request.objects.filter(queue=q, handler=DATAJOB, state="failed",
                                              finished_at__gte=since), rule,
                       job_field="request_id")
        for r in rows.order_by("finished_at")[:500]:
            job = r.request_id.removesuffix(".combine")
            letter = (DeadLetter.objects.filter(queue=q, request_id=r.request_id)
                      .order_by("dead_at").first())
            why = f": {letter.error[:PATTERN_SHOWN]}" if letter else ""
            step = " in its combine step" if r.request_id != job else ""
            out.found.append(Finding(
                subject=f"{q}/{job}", url=link("datajob", q, job),
                summary=f"data job {job} of queue {q} failed{step}{why}",
                resolved=f"data job {job} of queue {q} is no longer failed",
                details={"queue": q, "job": job, "tenant": r.tenant}))
    for subject in open_.keys() - {f.subject for f in out.found}:
        q, _, job = subject.partition("/")
        states = dict(Request.objects.filter(queue=q, request_id__in=[job, combine_id(job)])
                      .values_list("request_id", "state"))
        now = states.get(combine_id(job)) or states.get(job) or "gone from the history"
        out.why_resolved[subject] = f"data job {job} of queue {q} is no longer failed: {now}"
    return out


def datajob_slow(rule: AlertRule, look: Look, _open: Open) -> Outcome:
    """A data job's chunks still running past the threshold, or past `factor` times the
    median time of the queue's last done jobs."""
    c = CONDITIONS["datajob-slow"]
    factor = rule.factor if rule.factor is not None else (
        c.default_factor if rule.threshold is None else None)
    out = Outcome()
    for q in look.queues(rule.queue):
        limit = rule.threshold if factor is None else _usual(q, factor)
        if limit is None:
            continue
        rows = _scoped(Request.objects.filter(queue=q, handler=DATAJOB,
                                              state__in=("open", "active")), rule,
                       job_field="request_id").exclude(request_id__endswith=".combine")
        for r in rows.order_by("created_at")[:500]:
            took = (look.now - r.created_at).total_seconds()
            if took <= limit:
                continue
            usual = f" ({factor:g}x its usual time)" if factor is not None else ""
            out.found.append(Finding(
                subject=f"{q}/{r.request_id}", value=took, url=link("datajob", q, r.request_id),
                summary=f"data job {r.request_id} of queue {q} has run for "
                        f"{format_duration(took)}, over {format_duration(limit)}{usual}",
                resolved=f"data job {r.request_id} of queue {q} is no longer running long "
                         "(it finished, or was cancelled)",
                details={"queue": q, "job": r.request_id, "running_s": round(took)}))
    return out


def _usual(queue: str, factor: float) -> float | None:
    done = (Request.objects.filter(queue=queue, handler=DATAJOB, state="done",
                                   finished_at__isnull=False)
            .exclude(request_id__endswith=".combine").order_by("-finished_at")
            .values_list("created_at", "finished_at")[:USUAL_RUNS])
    took = [(f - c).total_seconds() for c, f in done]
    if len(took) < USUAL_AT_LEAST:
        return None
    return max(60.0, factor * float(statistics.median(took)))


# The evaluator's table: what each condition reads (core.alerts.engine has the others).
CHECKS = {"new-fingerprint": new_fingerprint, "dead-rate": dead_rate,
          "datajob-failed": datajob_failed, "datajob-slow": datajob_slow}

"""The queue's settings over the API: limits (core.ops.limits), retention (core.ops.retention)
and alerts (core.ops.alerts): the same services, checks, audit and words as `manage.py limit`,
`retention`, `alert` and their console pages."""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Status
from ninja.params.functions import Query

from core.ops import alerts, limits, retention

from .common import actor, outcome, reader, valid_id
from .requests import REFUSALS
from .schemas import ActionOut, Body

router = Router(tags=["limits, retention, alerts"])


class LimitIn(Body):
    on: str = Field(..., max_length=300, description="queue, handler=H, tenant=T, field=F or "
                                                     "resource=R")
    rate: str | None = Field(None, max_length=40, description="N/PERIOD, e.g. 100/1s, 5/m")
    concurrency: int | None = Field(None, ge=1, le=1_000_000)


def _limit_out(use: Any) -> dict[str, Any]:
    lim = use.limit
    return {"name": lim.name, "on": lim.on, "value": lim.value, "rate": lim.rate,
            "per_ms": lim.per_ms, "concurrency": lim.concurrency, "held": use.held,
            "started": use.started, "says": limits.describe(lim)}


@router.get("/queues/{queue}/limits", response={200: list[dict[str, Any]], **REFUSALS},
            summary="A queue's limits with their use now")
def list_limits(request: HttpRequest, queue: str) -> Any:
    reader(request)
    valid_id(queue, "queue name")
    return [_limit_out(u) for t in limits.table(queue) for u in t.limits]


@router.put("/queues/{queue}/limits/{name}", response={200: ActionOut, **REFUSALS},
            summary="Create or change a limit (admin); the next dequeue applies it")
def set_limit(request: HttpRequest, queue: str, name: str, body: LimitIn) -> Any:
    return outcome(limits.set_limit(actor(request), name, body.on, rate=body.rate,
                                    concurrency=body.concurrency, queue=queue))


@router.delete("/queues/{queue}/limits/{name}", response={200: ActionOut, **REFUSALS},
               summary="Remove a limit (admin)")
def remove_limit(request: HttpRequest, queue: str, name: str) -> Any:
    return outcome(limits.remove_limit(actor(request), name, queue=queue))


class RetentionIn(Body):
    duration: str = Field(..., max_length=40, description="like 30d, 12h, 90s")
    queue: str | None = Field(None, max_length=200, description="this queue only")


@router.get("/retention", response={200: dict[str, Any], **REFUSALS},
            summary="How long each kind of history is kept, and the pruner's last passes")
def show_retention(request: HttpRequest) -> Any:
    reader(request)
    rows, runs = retention.table()
    return {
        "kinds": [{"kind": r.kind.name, "what": r.kind.what, "seconds": r.every.seconds,
                   "text": r.every.text, "source": r.every.source,
                   "queues": {q: {"seconds": v.seconds, "text": v.text, "source": v.source}
                              for q, v in r.queues.items()}} for r in rows],
        "runs": [{"started_at": p.started_at.isoformat(), "seconds": p.seconds,
                  "source": p.source, "removed": p.removed, "longest_ms": p.longest_ms,
                  "error": p.error} for p in runs],
    }


@router.put("/retention/{kind}", response={200: ActionOut, **REFUSALS},
            summary="Keep a kind of history this long, everywhere or in one queue (admin)")
def set_retention(request: HttpRequest, kind: str, body: RetentionIn) -> Any:
    return outcome(retention.set_retention(actor(request), kind, body.duration,
                                           queue=body.queue or None))


@router.delete("/retention/{kind}", response={200: ActionOut, **REFUSALS},
               summary="Back to the setting or the default (admin)")
def unset_retention(request: HttpRequest, kind: str,
                    queue: str | None = Query(None, max_length=200)) -> Any:
    return outcome(retention.unset_retention(actor(request), kind, queue=queue or None))


@router.get("/alerts", response={200: dict[str, Any], **REFUSALS},
            summary="Alert channels, rules, open incidents and the last messages")
def list_alerts(request: HttpRequest) -> Any:
    reader(request)
    got = alerts.listing()
    return {
        "channels": [{"name": c.name, "kind": c.kind, "target": c.target,
                      "max_per_minute": c.max_per_minute} for c in got.channels],
        "rules": [{"name": r.name, "when": r.condition, "queue": r.queue,
                   "handler": r.handler, "tenant": r.tenant, "job": r.job,
                   "threshold": r.threshold, "for_s": r.for_s, "quiet_s": r.quiet_s,
                   "max_per_hour": r.max_per_hour, "enabled": r.enabled, "error": r.error,
                   "channels": sorted(c.name for c in r.channels.all())} for r in got.rules],
        "incidents": [{"rule": i.rule.name, "subject": i.subject, "status": i.status,
                       "started_at": i.started_at.isoformat(), "count": i.count,
                       "summary": i.summary} for i in got.incidents],
        "messages": [{"channel": m.channel_name, "status": m.status, "delivery": m.delivery,
                      "created_at": m.created_at.isoformat(), "attempts": m.attempts,
                      "error": m.error} for m in got.messages],
    }


class RuleIn(Body):
    name: str = Field(..., max_length=100)
    when: str = Field(..., max_length=30, description="the condition (docs/alerts.md)")
    channels: list[str] = Field(..., min_length=1, max_length=20)
    queue: str = Field("", max_length=200)
    handler: str = Field("", max_length=200)
    tenant: str = Field("", max_length=200)
    job: str = Field("", max_length=200)
    threshold: str = Field("", max_length=40)
    for_: str = Field("", max_length=40, alias="for")
    quiet: str = Field("", max_length=40)
    max_per_hour: int | None = Field(None, ge=1, le=10_000)


@router.post("/alerts/rules", response={201: dict[str, Any], **REFUSALS},
             summary="Add an alert rule (admin)")
def add_rule(request: HttpRequest, body: RuleIn) -> Any:
    rule = alerts.add_rule(actor(request), alerts.RuleSpec(
        name=body.name, when=body.when, channels=body.channels, queue=body.queue,
        handler=body.handler, tenant=body.tenant, job=body.job, threshold=body.threshold,
        for_=body.for_, quiet=body.quiet, max_per_hour=body.max_per_hour))
    return Status(201, {"name": rule.name, "enabled": rule.enabled})


@router.post("/alerts/rules/{name}/{command}", response={200: dict[str, Any], **REFUSALS},
             summary="Enable, disable or remove an alert rule (admin)")
def act_rule(request: HttpRequest, name: str,
             command: Literal["enable", "disable", "remove"]) -> Any:
    who = actor(request)
    if command == "remove":
        alerts.remove_rule(who, name)
        return {"removed": True}
    return {"changed": bool(alerts.enable_rule(who, name, command == "enable"))}

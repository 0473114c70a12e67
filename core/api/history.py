"""Schedules (list, add, pause, resume, remove, run now), search and the audit log."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Router, Status
from ninja.params.functions import Query

from core.console import search as console_search
from core.ops import audit, schedules
from core.ops.errors import BadInput, Refused
from core.queue.schedule.spec import InvalidSchedule, Schedule

from .common import actor, reader, utc, valid_id
from .requests import REFUSALS
from .schemas import Body

router = Router(tags=["schedules, search, audit"])


class ScheduleIn(Body):
    name: str = Field(..., max_length=128)
    handler: str = Field(..., max_length=200)
    tasks: list[Any] = Field(..., min_length=1, max_length=10_000)
    options: dict[str, Any] = Field(default_factory=dict)
    cron: str | None = Field(None, max_length=200)
    tz: str = Field("UTC", max_length=64)
    every_s: int | None = Field(None, ge=1, le=366 * 86_400)
    missed: str = Field("latest", max_length=20, description="latest, all or none")
    overlap: str = Field("skip", max_length=20, description="skip or allow")
    description: str = Field("", max_length=500)


def schedule_out(s: Any) -> dict[str, Any]:
    d = dataclasses.asdict(s.schedule)
    return {**d, "version": s.version, "next_ms": s.next_ms, "paused": s.paused,
            "paused_by": s.paused_by, "last_slot": s.last_slot, "fired": s.fired,
            "skipped": s.skipped, "errors": s.errors}


@router.get("/queues/{queue}/schedules", response={200: list[dict[str, Any]], **REFUSALS},
            summary="A queue's recurring schedules")
def list_schedules(request: HttpRequest, queue: str) -> Any:
    reader(request)
    return [schedule_out(s) for s in schedules.store(queue).all()]


@router.post("/queues/{queue}/schedules", response={201: dict[str, Any], **REFUSALS},
             summary="Add a schedule of tasks (admin)")
def add_schedule(request: HttpRequest, queue: str, body: ScheduleIn) -> Any:
    valid_id(queue, "queue name")
    s = Schedule(name=body.name, queue=queue, handler=body.handler, tasks=body.tasks,
                 options=body.options, cron=body.cron, tz=body.tz, every_s=body.every_s,
                 missed=body.missed, overlap=body.overlap, description=body.description)
    try:
        s = s.validated()
    except InvalidSchedule as exc:
        raise BadInput(str(exc)) from None
    change = schedules.save(actor(request), s, mode="create")
    return Status(201, {"status": change.status, "version": change.version})


class ScheduleEditIn(ScheduleIn):
    version: int | None = Field(None, ge=0, description="the version you read: refused (409) "
                                                        "if it changed since")


@router.put("/queues/{queue}/schedules/{name}", response={200: dict[str, Any], **REFUSALS},
            summary="Change a schedule (admin): its next runs follow the new spec")
def edit_schedule(request: HttpRequest, queue: str, name: str, body: ScheduleEditIn) -> Any:
    """Renaming is not an edit: `name` in the body must be the path's."""
    valid_id(queue, "queue name")
    if body.name != name:
        raise BadInput(f"the body names schedule {body.name[:128]!r}, the path {name[:128]!r}: "
                       "a schedule keeps its name (add one under the new name, remove the old)")
    s = Schedule(name=name, queue=queue, handler=body.handler, tasks=body.tasks,
                 options=body.options, cron=body.cron, tz=body.tz, every_s=body.every_s,
                 missed=body.missed, overlap=body.overlap, description=body.description)
    try:
        s = s.validated()
    except InvalidSchedule as exc:
        raise BadInput(str(exc)) from None
    change = schedules.save(actor(request), s, mode="replace", expect_version=body.version)
    return {"status": change.status, "version": change.version}


@router.post("/queues/{queue}/schedules/{name}/{command}",
             response={200: dict[str, Any], **REFUSALS},
             summary="A schedule's pause, resume, run-now (operate) or remove (admin)")
def act_schedule(request: HttpRequest, queue: str, name: str,
                 command: Literal["pause", "resume", "run-now", "remove"]) -> Any:
    who = actor(request)
    valid_id(queue, "queue name")
    if command == "run-now":
        return {"request_id": schedules.run_now(who, queue, name)}
    fn = {"pause": schedules.pause, "resume": schedules.resume,
          "remove": schedules.remove}[command]
    return {"changed": bool(fn(who, queue, name))}


@router.get("/search", response={200: dict[str, Any], **REFUSALS},
            summary="Requests whose payloads, errors or ids hold every word")
def search(request: HttpRequest, q: str = Query(..., max_length=200),
           queue: str | None = Query(None, max_length=200),
           after: str | None = Query(None, max_length=100)) -> Any:
    reader(request)
    found = console_search.text_matches(console_search.parse(q.strip(), queue), after)
    return {"count": found.count, "next": found.paged.next,
            "hits": [{"queue": h.queue, "request_id": h.request_id,
                      "created_at": h.created_at.isoformat(), "where": h.where,
                      "snippet": f"{h.before}{h.match}{h.after}"} for h in found.hits]}


@router.get("/audit", response={200: list[dict[str, Any]], **REFUSALS},
            summary="The audit log, newest first (page with ?before_id=)")
def audit_log(request: HttpRequest, user: str | None = Query(None, max_length=200),
              action: str | None = Query(None, max_length=20),
              since: dt.datetime | None = None, until: dt.datetime | None = None,
              before_id: int | None = Query(None, ge=1, le=2**62),
              limit: int = Query(50, ge=1, le=1000)) -> Any:
    who = reader(request)
    if not audit.may(who, "core.view_auditentry"):
        raise Refused(f"{who.name} may not read the audit log: it needs the permission "
                      "core.view_auditentry")
    return [{"id": e.id, "at": e.at.isoformat(), "actor": e.actor, "source": e.source,
             "action": e.action, "queue": e.queue, "target": e.target, "count": e.count,
             "acted": e.acted, "skipped": e.skipped, "refused": e.refused, "error": e.error}
            for e in audit.entries(user, action, utc(since, "since"), utc(until, "until"),
                                   before_id, limit)]

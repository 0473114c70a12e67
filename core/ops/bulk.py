"""Bulk actions: on every target a filter matches, safely.

preview() takes the snapshot of the target ids from the database (dead letters still dead, or
requests not finished, as the mirror last wrote them) and stores it with the count, a sample
and the filter in words. confirm() starts it (typed count above 1,000); the runner
(`manage.py runactions`, core.ops.runner) then works through exactly that snapshot, at most
1,000 ids per call into Redis, at the rate asked for, until it is done or stopped. The engine
checks each id's state when it acts, so an id that changed state since the preview is
skipped, never acted on twice; what arrived after the preview is not in the snapshot.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.models import BulkAction, DeadLetter, Request

from . import audit
from .actions import check_permission, open_queue
from .audit import as_actor
from .errors import BadInput, NotFound, Refused
from .perms import permission_for

ACTIONS = ("requeue", "delete", "cancel")
PREVIEW = "preview"  # the audit action of a preview (the run's own entry is its action's)
DEAD_FILTERS = ("handler", "tenant", "request", "fingerprint", "since", "until")
REQUEST_FILTERS = ("state", "tenant", "priority", "handler", "since", "until", "id")
UNFINISHED = ("open", "scheduled", "held", "active", "cancelling")
SAMPLE = 10
MAX_RATE = 100_000
MAX_TARGETS = 1_000_000


def _when(name: str, value: str) -> dt.datetime:
    try:
        parsed = dt.datetime.fromisoformat(value.strip())
        # In UTC here, so that a time whose offset moves it out of the calendar
        # (9999-12-31T23:59-23:59) is refused now, not by the database's adapter later.
        return parsed.astimezone(dt.UTC) if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    except (ValueError, OverflowError):
        raise BadInput(f"{name} must be a date or time such as 2026-11-23T14:05, between the "
                       f"years 1 and 9999 in UTC, not {value[:100]!r}") from None


def _clean(action: str, filters: dict[str, str]) -> dict[str, str]:
    names = REQUEST_FILTERS if action == "cancel" else DEAD_FILTERS
    unknown = sorted(set(filters) - set(names))
    if unknown:
        raise BadInput(f"unknown filter {', '.join(unknown)}: use {', '.join(names)}")
    out = {k: str(v).strip() for k, v in filters.items() if str(v or "").strip()}
    for k, v in out.items():
        if len(v) > 200:
            raise BadInput(f"{k} is longer than 200 characters")
        if k in ("since", "until"):
            _when(k, v)
    if "priority" in out and not (out["priority"].isdecimal() and int(out["priority"]) <= 99):
        raise BadInput(f"priority must be a whole number from 0 to 99, not {out['priority']!r}")
    if "state" in out and out["state"] not in UNFINISHED:
        raise BadInput(f"only unfinished requests can be cancelled: state must be one of "
                       f"{', '.join(UNFINISHED)}, not {out['state']!r}")
    return out


def _dead_rows(queue: str, f: dict[str, str]) -> QuerySet[DeadLetter]:
    rows = DeadLetter.still_dead(
        queue, handler=f.get("handler"), tenant=f.get("tenant"), request_id=f.get("request"),
        fingerprint=f.get("fingerprint"),
        since=_when("since", f["since"]) if "since" in f else None,
        until=_when("until", f["until"]) if "until" in f else None,
    )
    return rows.order_by("dead_at", "id")


def _request_rows(queue: str, f: dict[str, str]) -> QuerySet[Request]:
    rows = Request.objects.filter(queue=queue, state__in=[f["state"]] if "state" in f
                                  else ["open", "scheduled", "held", "active"],
                                  expired_at__isnull=True)
    for key in ("tenant", "handler"):
        if key in f:
            rows = rows.filter(**{key: f[key]})
    if "priority" in f:
        rows = rows.filter(priority=int(f["priority"]))
    if "id" in f:
        rows = rows.filter(request_id__startswith=f["id"])
    if "since" in f:
        rows = rows.filter(created_at__gte=_when("since", f["since"]))
    if "until" in f:
        rows = rows.filter(created_at__lt=_when("until", f["until"]))
    return rows.order_by("created_at", "id")


def describe(action: str, count: int, f: dict[str, str]) -> str:
    """The filter in words: "requeue 3,214 dead letters of handler=spark, since 10:02"."""
    noun = "requests" if action == "cancel" else "dead letters"
    if count == 1:
        noun = noun[:-1]
    parts = []
    for k, v in f.items():
        if k in ("since", "until"):
            when = _when(k, v)
            shown = when.strftime("%H:%M") if when.date() == timezone.now().date() else \
                when.strftime("%Y-%m-%d %H:%M")
            parts.append(f"{k} {shown}")
        else:
            parts.append(f"{k}={v}")
    words = f"{action} {count:,} {noun}"
    return f"{words} of {', '.join(parts)}" if parts else f"{words} (no filter: all of them)"


def preview(actor: Any, action: str, queue: str, filters: dict[str, str], *,
            audited: bool = True) -> BulkAction:
    """The snapshot of the ids `filters` matches now, stored; nothing is done yet. One audit
    entry (action "preview", linked to the bulk action) says who looked at what and how many:
    a preview reads every matching target and stores their ids. A caller whose own entry
    covers the preview (the command line's run or dry run) passes audited=False."""
    who = as_actor(actor)
    if action not in ACTIONS:
        raise BadInput(f"action must be one of {', '.join(ACTIONS)}, not {action!r}")
    check_permission(who, action, queue, f"preview of {filters}", 0)
    f = _clean(action, dict(filters))
    open_queue(queue)
    if action == "cancel":
        req_rows = _request_rows(queue, f)
        ids = list(req_rows.values_list("request_id", flat=True)[: MAX_TARGETS + 1])
        sample = [
            {"id": r["request_id"], "state": r["state"], "tenant": r["tenant"],
             "handler": r["handler"], "priority": r["priority"], "total": r["total"],
             "created_at": r["created_at"].isoformat()}
            for r in req_rows.values("request_id", "state", "tenant", "handler", "priority",
                                     "total", "created_at")[:SAMPLE]
        ]
    else:
        dead_rows = _dead_rows(queue, f)
        ids = list(dead_rows.values_list("entry_id", flat=True)[: MAX_TARGETS + 1])
        sample = [
            {"id": r["entry_id"], "request": r["request_id"], "task": r["task_id"],
             "handler": r["handler"], "exception": r["exception"], "error": r["error"][:200],
             "dead_at": r["dead_at"].isoformat()}
            for r in dead_rows.values("entry_id", "request_id", "task_id", "handler",
                                      "exception", "error", "dead_at")[:SAMPLE]
        ]
    if len(ids) > MAX_TARGETS:
        raise BadInput(f"the filter matches over {MAX_TARGETS:,} targets: narrow it")
    with transaction.atomic():
        made = BulkAction.objects.create(
            action=action, queue=queue, filters=f, description=describe(action, len(ids), f),
            target_ids=ids, count=len(ids), sample=sample, actor_name=who.name, user=who.user,
        )
        if audited:
            audit.record(who, PREVIEW, queue, target=f"bulk action #{made.pk}: "
                         f"{made.description}", count=made.count, bulk=made)
    return made


def get(bulk_id: int) -> BulkAction:
    """A bulk action as it stands (the progress fragment polls it); BulkAction.DoesNotExist
    if there is none."""
    if isinstance(bulk_id, bool) or not isinstance(bulk_id, int):
        try:
            bulk_id = int(bulk_id)
        except (TypeError, ValueError):
            raise BadInput(f"invalid bulk action id {bulk_id!r}") from None
    return BulkAction.objects.defer("target_ids").get(pk=bulk_id)


def _get_for(actor: Any, bulk_id: int, verb: str) -> tuple[Any, BulkAction]:
    who = as_actor(actor)
    try:
        b = get(bulk_id)
    except BulkAction.DoesNotExist:
        raise NotFound(f"there is no bulk action {bulk_id}") from None
    check_permission(who, b.action, b.queue, f"{verb} bulk action #{b.pk}: {b.description}",
                     b.count)
    return who, b


def _typed(value: str | None) -> int | None:
    text = (value or "").strip().replace(",", "").replace("_", "").replace(" ", "")
    return int(text) if text.isdecimal() else None


def confirm(
    actor: Any, bulk_id: int, typed_count: str | None = None, rate_per_s: int | None = None
) -> BulkAction:
    """Start a previewed bulk action (its status becomes "running"; the runner acts). Above
    1,000 targets the count must be typed. A second confirm of the same preview changes
    nothing and returns it with .already_confirmed True."""
    who, b = _get_for(actor, bulk_id, "confirm")
    if b.status != "previewed":
        b.already_confirmed = True
        return b
    if b.needs_typed_count and _typed(typed_count) != b.count:
        raise BadInput(f"type the number of targets ({b.count:,}) to confirm this bulk action")
    if (typed_count or "").strip() and _typed(typed_count) != b.count:
        # A count given where none is needed still has to be the preview's: a caller that
        # expected another number is acting on something else than it thinks.
        raise BadInput(f"the count given ({str(typed_count).strip()[:20]}) is not the "
                       f"preview's ({b.count:,}): preview again, or confirm with {b.count}")
    if rate_per_s is not None and (
        isinstance(rate_per_s, bool) or not isinstance(rate_per_s, int)
        or not 1 <= rate_per_s <= MAX_RATE
    ):
        raise BadInput(f"the rate must be a whole number of targets per second from 1 to "
                       f"{MAX_RATE:,}, not {rate_per_s!r}")
    with transaction.atomic():
        # One confirm wins, also when two arrive at once: the update is conditional.
        started = BulkAction.objects.filter(pk=b.pk, status="previewed").update(
            status="running", started_at=timezone.now(), rate_per_s=rate_per_s
        )
        if started:
            audit.record(who, b.action, b.queue, target=b.description, count=b.count, bulk=b)
    b = get(b.pk)
    b.already_confirmed = not started
    return b


def stop(actor: Any, bulk_id: int) -> BulkAction:
    """Ask the runner to stop after the chunk it is on ("stopping", then "stopped"); a
    preview never confirmed is stopped at once. One audit entry (action "stop", linked to
    the bulk action) says who stopped it, or that it had finished already (skipped)."""
    who = as_actor(actor)
    try:
        b = get(bulk_id)
    except BulkAction.DoesNotExist:
        raise NotFound(f"there is no bulk action {bulk_id}") from None
    target = f"stop bulk action #{b.pk}: {b.description}"
    if not audit.may(who, permission_for(b.action)):
        audit.record(who, "stop", b.queue, target=target, count=1, refused=True,
                     error=f"{who.name} lacks the permission {permission_for(b.action)}",
                     bulk=b)
        raise Refused(f"{who.name} may not stop a bulk {b.action}: it needs the permission "
                      f"{permission_for(b.action)} (the refusal was recorded)")
    now = timezone.now()
    with transaction.atomic():
        stopped = BulkAction.objects.filter(pk=b.pk, status="previewed").update(
            status="stopped", finished_at=now)
        stopped += BulkAction.objects.filter(pk=b.pk, status="running").update(
            status="stopping")
        audit.record(who, "stop", b.queue, target=target, count=1, acted=stopped,
                     skipped=1 - stopped, bulk=b)
    return get(b.pk)

"""Retention settings (issue 35): an admin sets how long a kind of history is kept, in every
queue or in one (the console's Retention page, `manage.py retention set`), or takes a setting
back (`retention unset`: the queue follows the setting for every queue again, that one the
environment's QA_RETAIN_* or the default); anyone may read them (`retention show`). A prune
now (`manage.py prune`) is an action too. Each checks core.change_retentionsetting and writes
one audit entry (a refusal too); the pruner's own passes in the services process are recorded
as PruneRun rows instead, one a minute being no operator's doing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction

from core.conf import redis_client
from core.mirror import retention, retention_prune
from core.mirror.retention import BadRetention, Kind, Value
from core.models import PruneRun, RetentionSetting
from core.queue import InvalidInput, QueueError, read
from core.queue.keys import validate_id

from . import audit
from .actions import Result, check_permission
from .audit import as_actor
from .errors import BadInput

RUNS_SHOWN = 10


@dataclass(frozen=True)
class Row:
    """One kind: what every queue keeps, and the queues with their own."""

    kind: Kind
    every: Value
    queues: dict[str, Value]


def table() -> tuple[list[Row], list[PruneRun]]:
    """Every kind's retention and where it comes from, and the pruner's last passes; BadInput
    if a QA_RETAIN_ setting is not a duration."""
    try:
        policy = retention.load()
    except BadRetention as exc:
        raise BadInput(str(exc)) from None
    rows = [Row(kind, policy.defaults[name], dict(policy.queues(name)))
            for name, kind in retention.KINDS.items()]
    runs = list(PruneRun.objects.order_by("-started_at", "-id")[:RUNS_SHOWN])
    return rows, runs


def _checked(kind: str, queue: str | None) -> tuple[Kind, str]:
    """The kind and queue name given (BadInput if either is not one), once the environment's
    settings are known to be durations (BadInput naming the variable otherwise)."""
    try:
        k = retention.kind_of(kind)
        name = validate_id(queue, "queue name") if queue else ""
        retention.from_settings(k)
    except (BadRetention, InvalidInput) as exc:
        raise BadInput(str(exc)) from None
    return k, name


def set_retention(who: Any, kind: str, duration: str, *, queue: str | None = None) -> Result:
    """Keep `kind` for `duration` (30d, 12h, 90s, "forever") in `queue`, or in every queue
    that has no setting of its own. The next pass of the pruner applies it."""
    actor = as_actor(who)
    where = f"queue {queue}" if queue else "every queue"
    target = f"{str(kind)[:40]} in {str(where)[:220]}: {str(duration)[:40]}"
    check_permission(actor, "retention-set", str(queue or "")[:200], target, 1)
    k, name = _checked(kind, queue)
    try:
        seconds = retention.parse_duration(duration)
    except BadRetention as exc:
        raise BadInput(str(exc)) from None
    with transaction.atomic():
        row = RetentionSetting.objects.select_for_update().filter(kind=k.name, queue=name).first()
        before = _before(k, name, row)
        changed = row is None or row.seconds != seconds
        if row is None:
            row = RetentionSetting(kind=k.name, queue=name)
        row.seconds, row.updated_by = seconds, actor.name[:200]
        row.save()
        text = f"{k.name} in {where}: {before.text} -> {retention.format_duration(seconds)}"
        entry = audit.record(actor, "retention-set", name, target=text, count=1,
                             acted=int(changed), skipped=int(not changed))
    message = (f"{k.title} are now kept {_for(seconds)} in {where} (were {_for(before.seconds)}"
               f", {before.source}); the pruner applies it at its next pass"
               if changed else f"{k.title} were kept {_for(seconds)} in {where} already")
    note = _unknown_queue(name) if name else ""
    return Result("retention-set", int(changed), int(not changed), message, entry.id,
                  (note,) if note else ())


def unset_retention(who: Any, kind: str, *, queue: str | None = None) -> Result:
    """Take back what an admin set for `kind` in `queue` (or in every queue): the queue then
    follows the setting for every queue, that one the environment or the default."""
    actor = as_actor(who)
    where = f"queue {queue}" if queue else "every queue"
    target = f"{str(kind)[:40]} in {str(where)[:220]}"
    check_permission(actor, "retention-unset", str(queue or "")[:200], target, 1)
    k, name = _checked(kind, queue)
    with transaction.atomic():
        row = RetentionSetting.objects.select_for_update().filter(kind=k.name, queue=name).first()
        if row is not None:
            row.delete()
        after = retention.from_settings(k) if not name else _every(k)
        entry = audit.record(
            actor, "retention-unset", name, count=1, acted=int(row is not None),
            skipped=int(row is None),
            target=f"{k.name} in {where}: "
                   f"{retention.format_duration(row.seconds) if row else 'not set'} -> "
                   f"{after.text} ({after.source})")
    if row is None:
        message = f"nothing was set for {k.title} in {where}: nothing changed"
    else:
        message = (f"{k.title} in {where} follow {'the settings' if not name else 'every queue'}"
                   f" again: kept {_for(after.seconds)} ({after.source})")
    return Result("retention-unset", int(row is not None), int(row is None), message, entry.id)


def prune_now(who: Any, *, export_audit: str | None = None) -> retention_prune.Report:
    """One pass of the pruner now, as the services process runs it; audited with what it
    removed. BadInput if a QA_RETAIN_ setting is not a duration."""
    actor = as_actor(who)
    check_permission(actor, "prune", "", "prune now", 0)
    try:
        policy = retention.load()
    except BadRetention as exc:
        raise BadInput(str(exc)) from None
    if export_audit:
        _writable(export_audit)
    from django.utils import timezone

    started = timezone.now()
    report = retention_prune.prune(policy=policy, export_audit=export_audit)
    retention_prune.record(report, started=started, source=actor.source)
    gone = report.total
    target = ", ".join(f"{k} {n}" for k, n in report.removed.items() if n) or "nothing to prune"
    audit.record(actor, "prune", "", target=f"prune now: {target}"[:2000], count=gone, acted=gone,
                 error="; ".join(report.errors)[:2000])
    return report


def _writable(path: str) -> None:
    """BadInput unless the audit entries can be appended to `path` (made if missing)."""
    import os

    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.close(fd)
    except OSError as exc:
        raise BadInput(f"--export-audit {path}: cannot write there ({exc.strerror})") from None


def _before(k: Kind, queue: str, row: RetentionSetting | None) -> Value:
    if row is not None:
        return Value(row.seconds, f"set by {row.updated_by}" if row.updated_by else "set")
    return _every(k) if queue else retention.from_settings(k)


def _every(k: Kind) -> Value:
    """What every queue keeps of `k`: the setting for every queue, else the environment's."""
    row = RetentionSetting.objects.filter(kind=k.name, queue="").first()
    return _before(k, "", row) if row is not None else retention.from_settings(k)


def _for(seconds: int | None) -> str:
    return "forever" if seconds is None else f"for {retention.format_duration(seconds)}"


def _unknown_queue(name: str) -> str:
    """A note when no producer or worker has used the queue (a typo?); nothing when Redis
    cannot say."""
    try:
        known = read.queues(redis_client(), prefix=settings.QUEUE_PREFIX)
    except QueueError:
        return ""
    if name in known or name == "default":
        return ""
    return (f"no producer or worker has used queue {name!r} yet: the setting holds once one "
            "does (check the name)")

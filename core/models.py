"""The console's durable history: what Redis forgets once a request's retention is over.

Redis holds the live queue; the first tables mirror it (`core.mirror`, run by `runmirror`) from
the queue's `events` and `dead` streams, so that finished requests, dead letters and the
counters behind the charts can be listed, filtered and grouped with indexed SQL long after
Redis has expired them. The mirror writes them; nothing else does, except the operator
actions that change what a row says (a dead letter requeued or deleted). The last two are
the operator actions' own: the audit log and the bulk actions (core.ops).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.conf import settings
from django.db import models

STATE_CHOICES = [
    (s, s) for s in ("open", "scheduled", "held", "active", "cancelling", "done", "failed",
                     "cancelled")
]


class Request(models.Model):
    """One request of one queue, as its Redis hash last said."""

    queue = models.CharField(max_length=200)
    request_id = models.CharField(max_length=200)
    state = models.CharField(max_length=12, choices=STATE_CHOICES)
    priority = models.PositiveSmallIntegerField(default=0)
    concurrency = models.BigIntegerField(default=0)
    tenant = models.CharField(max_length=200, default="")
    handler = models.CharField(max_length=200, default="")
    max_attempts = models.PositiveIntegerField(default=0)
    # Counters as of the last event applied (final once the request is finished).
    total = models.BigIntegerField(default=0)
    waiting = models.BigIntegerField(default=0)
    leased = models.BigIntegerField(default=0)
    delayed = models.BigIntegerField(default=0)
    done = models.BigIntegerField(default=0)
    dead = models.BigIntegerField(default=0)
    cancelled = models.BigIntegerField(default=0)
    discarded = models.BigIntegerField(default=0)  # dead letters an operator deleted
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # How many times the request reached a final state (a requeue of its dead letters reopens
    # it, and it completes again).
    completions = models.PositiveIntegerField(default=0)
    # Stream id of the last event of this request applied: an event at or before it changes
    # nothing, which makes replaying the stream harmless.
    last_event_id = models.CharField(max_length=40, default="")
    # When the mirror found the request's hash gone from Redis (its retention ended).
    expired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "request_id"], name="request_queue_id")
        ]
        indexes = [
            models.Index(fields=["queue", "created_at"], name="request_queue_created"),
            models.Index(fields=["queue", "finished_at"], name="request_queue_finished"),
            models.Index(fields=["queue", "state", "created_at"], name="request_queue_state"),
            models.Index(fields=["queue", "tenant", "created_at"], name="request_queue_tenant"),
            models.Index(fields=["queue", "handler", "created_at"], name="request_queue_handler"),
            models.Index(fields=["request_id"], name="request_id"),
        ]
        # Operator actions (core.ops.perms): granted through groups by migration 0004.
        permissions = [
            ("view_console", "Can view the operations console"),
            ("cancel_request", "Can cancel requests"),
            ("claim_task", "Can claim or release pending tasks and reclaim dead workers"),
            ("pause_queue", "Can pause and resume a queue"),
            # The console's data job form (issue 9): granted by migration 0005.
            ("submit_datajob", "Can submit data jobs"),
            # Recurring schedules (issue 19): granted by migration 0009.
            ("run_schedule", "Can run now, pause and resume schedules"),
            ("change_schedule", "Can create, edit and delete schedules"),
            # Worker control (issue 20): quiet, stop, resume; granted by migration 0012.
            ("control_worker", "Can quiet, stop and resume workers"),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.request_id} ({self.state})"


class DeadLetter(models.Model):
    """One entry of a queue's `dead` stream, with the fingerprint that groups it."""

    queue = models.CharField(max_length=200)
    entry_id = models.CharField(max_length=40)  # its id in the dead stream
    request_id = models.CharField(max_length=200)
    task_id = models.CharField(max_length=40)
    handler = models.CharField(max_length=200, default="")
    tenant = models.CharField(max_length=200, default="")
    exception = models.CharField(max_length=200, default="")  # class name, e.g. "ValueError"
    error = models.TextField(default="")
    traceback = models.TextField(default="")
    payload = models.TextField(default="")
    attempts = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=200, default="")
    dead_at = models.DateTimeField()
    # sha1 of handler + exception class + masked message; `pattern` is that masked message.
    fingerprint = models.CharField(max_length=40)
    pattern = models.TextField(default="")
    # Set when the letter left the dead stream: "requeued" or "deleted" (by an operator).
    resolution = models.CharField(max_length=12, default="", blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "entry_id"], name="deadletter_queue_entry")
        ]
        indexes = [
            models.Index(fields=["queue", "fingerprint", "dead_at"], name="dead_queue_fp"),
            models.Index(fields=["queue", "dead_at"], name="dead_queue_time"),
            models.Index(fields=["queue", "handler", "dead_at"], name="dead_queue_handler"),
            models.Index(fields=["queue", "tenant", "dead_at"], name="dead_queue_tenant"),
            models.Index(fields=["queue", "request_id"], name="dead_queue_request"),
            models.Index(fields=["task_id"], name="dead_task"),  # search by task id
        ]
        # delete_deadletter is one of Django's default permissions of this model.
        permissions = [("requeue_deadletter", "Can requeue dead letters")]

    def __str__(self) -> str:
        return f"{self.queue}/{self.entry_id} {self.exception}"

    @classmethod
    def still_dead(
        cls, queue: str, *, handler: str | None = None, tenant: str | None = None,
        request_id: str | None = None, fingerprint: str | None = None,
        since: dt.datetime | None = None, until: dt.datetime | None = None,
    ) -> models.QuerySet[DeadLetter]:
        """The queue's letters still in the dead stream, narrowed by what is given: what the
        dead-letter pages list and what a bulk action on their filter snapshots, alike."""
        rows = cls.objects.filter(queue=queue, resolution="")
        for field, value in (("handler", handler), ("tenant", tenant),
                             ("request_id", request_id), ("fingerprint", fingerprint)):
            if value:
                rows = rows.filter(**{field: value})
        if since:
            rows = rows.filter(dead_at__gte=since)
        if until:
            rows = rows.filter(dead_at__lt=until)
        return rows


class QueueSample(models.Model):
    """A queue's cumulative counters (the engine's `stats` hash) at one moment, taken by the
    mirror about every ten seconds: the charts are the differences between samples."""

    queue = models.CharField(max_length=200)
    at = models.DateTimeField()
    submitted = models.BigIntegerField(default=0)
    done = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    retried = models.BigIntegerField(default=0)
    waiting = models.BigIntegerField(default=0)
    leased = models.BigIntegerField(default=0)
    dead = models.BigIntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["queue", "at"], name="sample_queue_at")]

    def __str__(self) -> str:
        return f"{self.queue} @ {self.at:%Y-%m-%d %H:%M:%S}"


def _no_buckets() -> list[int]:
    return []


class HandlerCounts(models.Model):
    """One handler's counts over a period (core/queue/metrics.py): tasks done, dead-lettered
    and retried, the run-time histogram of the timed runs done (bucket counts, not
    cumulative; the bounds are core.queue.metrics.BUCKETS_MS) with their summed time, and
    the summed time of the timed failed runs."""

    queue = models.CharField(max_length=200)
    handler = models.CharField(max_length=128)
    done = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    retried = models.BigIntegerField(default=0)
    run_us = models.BigIntegerField(default=0)  # the timed runs done, in the buckets
    buckets = models.JSONField(default=_no_buckets)
    fail_us = models.BigIntegerField(default=0)  # the timed failed runs

    class Meta:
        abstract = True


class HandlerMinute(HandlerCounts):
    """A minute of one handler, as the engine counted it in Redis: the mirror stores the
    minute's absolute counts (so reading a minute again changes nothing) and keeps a day."""

    minute = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "minute", "handler"],
                                               name="handler_minute_unique")]

    def __str__(self) -> str:
        return f"{self.queue}/{self.handler} @ {self.minute:%Y-%m-%d %H:%M}"


class HandlerHour(HandlerCounts):
    """An hour of one handler: the sum of its minutes, kept 90 days."""

    hour = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "hour", "handler"],
                                               name="handler_hour_unique")]

    def __str__(self) -> str:
        return f"{self.queue}/{self.handler} @ {self.hour:%Y-%m-%d %H}h"


class HandlerTotal(HandlerCounts):
    """Everything one handler ever counted (never pruned): the monotonic counters and
    histograms /metrics serves to Prometheus."""

    class Meta:
        constraints = [models.UniqueConstraint(fields=["queue", "handler"],
                                               name="handler_total_unique")]

    def __str__(self) -> str:
        return f"{self.queue}/{self.handler}"


class MetricsCursor(models.Model):
    """Per queue, the first minute the mirror has not seen closed: the next roll reads the
    minutes from there to the current one (minutes since the epoch)."""

    queue = models.CharField(max_length=200, unique=True)
    minute = models.BigIntegerField()

    def __str__(self) -> str:
        return f"{self.queue} from minute {self.minute}"


BULK_STATUSES = ["previewed", "running", "stopping", "stopped", "done", "failed"]
TYPED_COUNT_ABOVE = 1000  # a bulk action on more targets needs its count typed to start


class BulkAction(models.Model):
    """An operator action on every target a filter matched when it was previewed: the snapshot
    of their ids is stored here, and `runactions` works through it chunk by chunk."""

    action = models.CharField(max_length=20)  # requeue, delete, cancel
    queue = models.CharField(max_length=200)
    filters = models.JSONField(default=dict)
    description = models.TextField(default="")  # the filter in words, with the count
    target_ids = models.JSONField(default=list)  # the snapshot: dead letter or request ids
    count = models.PositiveIntegerField(default=0)
    sample = models.JSONField(default=list)  # up to 10 rows for the preview page
    status = models.CharField(max_length=12, default="previewed",
                              choices=[(s, s) for s in BULK_STATUSES])
    position = models.PositiveIntegerField(default=0)  # ids of the snapshot handled so far
    acted = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    error = models.TextField(default="", blank=True)
    rate_per_s = models.PositiveIntegerField(null=True, blank=True)  # None: as fast as it goes
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    actor_name = models.CharField(max_length=200, default="")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.SET_NULL, related_name="+")

    class Meta:
        indexes = [models.Index(fields=["status", "id"], name="bulk_status")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.description} ({self.status})"

    # Set by core.ops.bulk.confirm() on the object it returns: a second confirm of one preview.
    already_confirmed: bool = False

    @property
    def needs_typed_count(self) -> bool:
        return bool(self.count > TYPED_COUNT_ABOVE)

    @property
    def progress_percent(self) -> int:
        if self.status == "done" or not self.count:
            return 100 if self.status == "done" else 0
        return int(min(100, self.position * 100 // self.count))

    @property
    def finished(self) -> bool:
        return self.status in ("stopped", "done", "failed")

    def as_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in ("id", "action", "queue", "description", "count",
                                              "status", "acted", "skipped", "error")}


class AuditEntry(models.Model):
    """One run of an operator action, or its refusal: who, when, what, on what, and what came
    of it. Written by core.ops only; never edited (the admin shows it read-only)."""

    at = models.DateTimeField(auto_now_add=True)
    actor = models.CharField(max_length=200)  # the user name, or "os:<login>" for the CLI
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                             on_delete=models.SET_NULL, related_name="+")
    source = models.CharField(max_length=10)  # console, admin, cli
    action = models.CharField(max_length=20)
    queue = models.CharField(max_length=200, default="")
    target = models.TextField(default="")  # the ids, or the filter in words
    count = models.PositiveIntegerField(default=0)  # targets given (a bulk: its snapshot)
    acted = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    refused = models.BooleanField(default=False)
    error = models.TextField(default="", blank=True)
    bulk = models.ForeignKey(BulkAction, null=True, blank=True, on_delete=models.SET_NULL,
                             related_name="audit")

    class Meta:
        indexes = [
            models.Index(fields=["actor", "id"], name="audit_actor"),
            models.Index(fields=["action", "id"], name="audit_action"),
            models.Index(fields=["at"], name="audit_at"),
        ]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.queue}"


class ScheduleRecord(models.Model):
    """One recurring schedule of one queue (core.queue.schedule), as Redis last said: kept
    current by the mirror and kept after the schedule is removed, for its history and for
    `manage.py schedule restore` after Redis lost its data.

    A schedule removed through core.ops (console, CLI) is marked `removed_by` its actor; one
    that vanished from Redis otherwise (Redis lost its data) only gets `removed_at`: those
    are the ones restore declares again."""

    queue = models.CharField(max_length=200)
    name = models.CharField(max_length=200)
    definition = models.JSONField(default=dict)  # the schedule's spec, as Redis stores it
    version = models.PositiveIntegerField(default=0)  # bumped by every edit, pause, resume
    paused = models.BooleanField(default=False)
    paused_by = models.CharField(max_length=200, default="", blank=True)
    next_run = models.DateTimeField(null=True, blank=True)  # None: paused or ended
    last_slot = models.DateTimeField(null=True, blank=True)  # the last slot it fired
    fired = models.BigIntegerField(default=0)
    skipped = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    # When the schedule was first created; kept when it is lost and restored.
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()  # its definition or pause last changed
    # Its `created_ms` in Redis: tells a schedule created again under the same name apart
    # from the one this row followed.
    created_ms = models.BigIntegerField(default=0)
    seen_at = models.DateTimeField()  # the last time the mirror found it in Redis
    removed_at = models.DateTimeField(null=True, blank=True)
    removed_by = models.CharField(max_length=200, default="", blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "name"], name="schedule_queue_name")
        ]

    def __str__(self) -> str:
        gone = " (removed)" if self.removed_at else ""
        return f"{self.queue}/{self.name}{gone}"


class SearchDoc(models.Model):
    """What the console's search box matches of one request (core.mirror.search writes it, from
    the request's events, hash and dead letters): bounded text, so that the history stays
    searchable after Redis forgets the request and its tasks. On PostgreSQL the table also has a
    generated column `vector` (tsvector) with a GIN index, added by migration 0011 alone."""

    queue = models.CharField(max_length=200)
    request_id = models.CharField(max_length=200)
    created_at = models.DateTimeField()  # the request's: results are paged by it
    # Its id, tenant, handler and the ids of its first tasks and of its dead tasks.
    words = models.TextField(default="")
    # Its first tasks' payloads (as the submitted/added events carry them), then those of its
    # dead tasks; capped (core.mirror.search.PAYLOADS_MAX).
    payloads = models.TextField(default="")
    errors = models.TextField(default="")  # its dead letters' messages, each once; capped
    # Newest events (submitted, added) and dead-stream entries folded in: older ones are not
    # folded in again, so replaying the streams changes nothing.
    last_event_id = models.CharField(max_length=40, default="")
    last_dead_id = models.CharField(max_length=40, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["queue", "request_id"], name="search_queue_id")
        ]
        indexes = [
            models.Index(fields=["created_at"], name="search_created"),
            models.Index(fields=["queue", "created_at"], name="search_queue_created"),
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.request_id}"

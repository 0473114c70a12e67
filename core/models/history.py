"""The queues' history the mirror keeps (core.mirror, from the `events` and `dead` streams):
requests, their events, dead letters and the counter samples behind the charts."""

from __future__ import annotations

import datetime as dt

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
    # Its events kept as RequestEvent rows: the task events (a task's retry, death, release...)
    # of its current run (since it was submitted or last reopened), kept up to
    # core.mirror.events.TASK_EVENTS_KEPT; and the task events not kept, over its life. NULL
    # reads as 0: nullable, so that adding them to a large history is no copy of its table on
    # SQLite (ALTER TABLE ADD COLUMN).
    task_events = models.PositiveIntegerField(null=True, blank=True)
    events_dropped = models.BigIntegerField(null=True, blank=True)

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


class RequestEvent(models.Model):
    """One event of one request from its queue's `events` stream (submitted, retried, dead,
    requeued, reopened, completed, cancelled...), kept by the mirror so that a request's
    timeline outlives the capped stream. Bounded per request: every event of the request as a
    whole, and up to core.mirror.events.TASK_EVENTS_KEPT events of single tasks per run (the
    rest are counted in Request.events_dropped)."""

    queue = models.CharField(max_length=200)
    request_id = models.CharField(max_length=200)
    entry_id = models.CharField(max_length=40)  # its id in the events stream
    at_ms = models.BigIntegerField()  # ms since the epoch: its stream id's, the Redis clock's
    kind = models.CharField(max_length=20)
    task_id = models.CharField(max_length=40, default="", blank=True)
    # The event's other fields (state, error, worker, outcome...) as a JSON object's text.
    detail = models.TextField(default="", blank=True)

    class Meta:
        # No unique index on (queue, entry_id): the mirror writes an event once (the events
        # after its request's last_event_id, in the same transaction), by COPY on PostgreSQL,
        # which cannot skip a conflict; the timeline shows an event once whatever the rows.
        indexes = [models.Index(fields=["queue", "request_id", "at_ms"], name="event_request")]

    def __str__(self) -> str:
        return f"{self.queue}/{self.request_id} {self.kind} @ {self.entry_id}"


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
            # The resolved letters by when, for the pruner (core.mirror.retention_prune).
            models.Index(fields=["queue", "resolved_at"], name="dead_resolved",
                         condition=~models.Q(resolution="")),
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

"""The console's durable history: what Redis forgets once a request's retention is over.

Redis holds the live queue; these tables mirror it (`core.mirror`, run by `runmirror`) from
the queue's `events` and `dead` streams, so that finished requests, dead letters and the
counters behind the charts can be listed, filtered and grouped with indexed SQL long after
Redis has expired them. The mirror writes them; nothing else does, except the operator
actions that change what a row says (a dead letter requeued or deleted).
"""

from __future__ import annotations

from django.db import models

STATE_CHOICES = [
    (s, s) for s in ("open", "active", "cancelling", "done", "failed", "cancelled")
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
        permissions = [("view_console", "Can view the operations console")]

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
        ]

    def __str__(self) -> str:
        return f"{self.queue}/{self.entry_id} {self.exception}"


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

"""The recurring schedules' history in the database (core.mirror.schedules)."""

from __future__ import annotations

from django.db import models


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

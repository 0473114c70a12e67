"""The operator actions' own records (core.ops): bulk actions and their snapshots, and the
audit log of every action from every entry point."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

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

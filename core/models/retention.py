"""Retention (issue 35): how long each kind of history is kept, per queue, and what the pruner
did. The kinds, their defaults and the settings behind them are core.mirror.retention's; the
pruner is core.mirror.retention_prune."""

from __future__ import annotations

from django.db import models


class RetentionSetting(models.Model):
    """How long one kind of history is kept in one queue, or in every queue (`queue` ""),
    as an admin set it from the console or `manage.py retention set`: over the settings'
    defaults (QA_RETAIN_*), and a queue's own over the one for every queue."""

    kind = models.CharField(max_length=20)  # core.mirror.retention.KINDS
    queue = models.CharField(max_length=200, default="", blank=True)  # "": every queue
    seconds = models.BigIntegerField(null=True, blank=True)  # None: kept forever
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=200, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "queue"],
                                               name="retention_kind_queue")]

    def __str__(self) -> str:
        return f"{self.kind} in {self.queue or 'every queue'}: {self.seconds} s"


class PruneRun(models.Model):
    """One pass of the pruner (the services process's, or `manage.py prune`): what it removed
    by kind, in how many batches, and its longest batch, the longest any lock was held. Kept
    PRUNE_RUNS_KEPT days by the pruner itself."""

    started_at = models.DateTimeField()
    seconds = models.FloatField(default=0.0)
    source = models.CharField(max_length=10, default="services")  # services, cli
    removed = models.JSONField(default=dict)  # kind -> rows removed
    batches = models.PositiveIntegerField(default=0)
    longest_ms = models.FloatField(default=0.0)
    longest_at = models.CharField(max_length=250, default="")  # the kind and queue of it
    error = models.TextField(default="", blank=True)

    class Meta:
        indexes = [models.Index(fields=["started_at"], name="prune_run_started")]

    def __str__(self) -> str:
        return f"prune @ {self.started_at:%Y-%m-%d %H:%M:%S}: {self.total} rows"

    @property
    def total(self) -> int:
        """Rows removed, a finished request's events not counted apart."""
        return sum(int(n) for k, n in self.removed.items() if k != "request-events")

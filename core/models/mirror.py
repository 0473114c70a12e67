"""Where the mirror stands (core.mirror): how far each queue's `events` stream is applied to the
database, so that several mirror processes apply its batches once each and in order."""

from __future__ import annotations

from django.db import models


class MirrorPosition(models.Model):
    """The last entry of a queue's `events` stream whose batch the database holds: written in
    the transaction of every batch, read (and locked) at its start. A batch at or before it is
    not applied again; a batch after it waits until the entries between are applied (they
    belong to another mirror process's batch, core.mirror.commit)."""

    queue = models.CharField(max_length=200, unique=True)
    applied_to = models.CharField(max_length=40, default="0-0")  # a stream id
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.queue} @ {self.applied_to}"

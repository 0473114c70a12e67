"""Queue samples: a queue's cumulative counters every SAMPLE_EVERY_S, from which the console
charts rates (the difference between two samples over the time between them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from core.models import QueueSample
from core.queue import read
from core.queue.client import Queue

SAMPLE_EVERY_S = 10.0
KEEP = timedelta(days=8)  # a week of charts, and a day to spare


def sample(q: Queue, *, now: datetime | None = None) -> QueueSample:
    """Record the queue's counters now (read.stats: one pipelined round trip)."""
    s = read.stats(q)
    row: QueueSample = QueueSample.objects.create(
        queue=q.name, at=now or datetime.now(UTC),
        submitted=s.totals.get("submitted", 0), done=s.totals.get("done", 0),
        failed=s.totals.get("failed", 0), retried=s.totals.get("retried", 0),
        waiting=s.waiting, leased=s.leased, dead=s.dead,
    )
    return row


def prune(queue: str, *, now: datetime | None = None, keep: timedelta = KEEP) -> int:
    """Delete the queue's samples older than `keep`; returns how many."""
    cutoff = (now or datetime.now(UTC)) - keep
    deleted, _ = QueueSample.objects.filter(queue=queue, at__lt=cutoff).delete()
    return int(deleted)

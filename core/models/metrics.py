"""The handlers' metrics the mirror rolls up from the engine's per-minute counts: by minute,
by hour and since they began, and where each queue's roll-up stands."""

from __future__ import annotations

from django.db import models


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

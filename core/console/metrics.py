"""/metrics: a Prometheus collector over the same cached aggregates the pages read, and the
handlers' counters and run-time histograms that the mirror keeps in the database."""

from __future__ import annotations

from collections.abc import Iterator

from django.db import DatabaseError
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from core.conf import get_queue
from core.models import HandlerTotal
from core.queue import Queue, RedisReplyError, RedisUnavailable
from core.queue.metrics import BUCKETS_MS, NBUCKETS
from core.queue.schedule.store import Schedules

from .aggregates import cached, summary
from .queues import queue_names


def schedule_counts(queue: Queue) -> dict[str, int]:
    """The queue's recurring schedules by status: active, paused, ended (cached as the
    summaries are)."""
    return cached(f"schedules|{queue.keys.prefix}|{queue.name}", lambda: Schedules(queue).counts())


class QueueCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("queueadmin_redis_up", "Whether Redis answered", labels=[])
        waiting = GaugeMetricFamily("queueadmin_waiting_tasks", "Tasks waiting",
                                    labels=["queue", "priority"])
        leased = GaugeMetricFamily("queueadmin_leased_tasks", "Tasks leased to workers",
                                   labels=["queue"])
        expired = GaugeMetricFamily("queueadmin_expired_leases",
                                    "Leases past their expiry not recovered yet", labels=["queue"])
        delayed = GaugeMetricFamily("queueadmin_delayed_tasks", "Tasks in retry backoff",
                                    labels=["queue"])
        dead = GaugeMetricFamily("queueadmin_dead_letters", "Dead letters", labels=["queue"])
        requests = GaugeMetricFamily("queueadmin_requests", "Requests by state",
                                     labels=["queue", "state"])
        workers = GaugeMetricFamily("queueadmin_workers", "Registered workers",
                                    labels=["queue", "state"])
        totals = CounterMetricFamily("queueadmin_tasks", "Tasks counted since the queue began",
                                     labels=["queue", "outcome"])
        scheduled = GaugeMetricFamily("queueadmin_scheduled_requests",
                                      "Delayed requests waiting for their due time",
                                      labels=["queue"])
        due_soon = GaugeMetricFamily("queueadmin_scheduled_due_next_hour",
                                     "Delayed requests due within the hour (or overdue)",
                                     labels=["queue"])
        schedules = GaugeMetricFamily("queueadmin_schedules",
                                      "Recurring schedules by status (active, paused, ended)",
                                      labels=["queue", "status"])
        ok = 1
        try:
            queues = [get_queue(name) for name in queue_names()]
            summaries = [summary(q) for q in queues]
            counts = [schedule_counts(q) for q in queues]
        except (RedisUnavailable, RedisReplyError):
            ok, summaries, counts = 0, [], []
        for s, by_status in zip(summaries, counts, strict=True):
            scheduled.add_metric([s.name], s.stats.scheduled)
            due_soon.add_metric([s.name], s.stats.due_next_hour)
            for status, n in by_status.items():
                schedules.add_metric([s.name, status], n)
        for s in summaries:
            name = s.name
            for prio, n in s.stats.waiting_by_priority.items():
                waiting.add_metric([name, str(prio)], n)
            leased.add_metric([name], s.stats.leased)
            expired.add_metric([name], s.expired_leases)
            delayed.add_metric([name], s.stats.delayed)
            dead.add_metric([name], s.stats.dead)
            for state, n in s.stats.requests_by_state.items():
                requests.add_metric([name, state], n)
            workers.add_metric([name, "live"], s.live_workers)
            workers.add_metric([name, "stale"], s.stale_workers)
            for outcome in ("submitted", "done", "failed", "retried"):
                totals.add_metric([name, outcome], s.stats.totals.get(outcome, 0))
        up.add_metric([], ok)
        yield from (up, waiting, leased, expired, delayed, dead, requests, workers, totals,
                    scheduled, due_soon, schedules)


class HandlerCollector(Collector):
    """Per handler: tasks by outcome, and the run-time histogram, since metrics began (the
    mirror's totals: they follow the engine within a few seconds while `runmirror` runs).
    A family of its own beside queueadmin_tasks_total{queue,outcome} (the queue's counters,
    submitted included): one family with both would count every task twice in a sum()."""

    def collect(self) -> Iterator[Metric]:
        tasks = CounterMetricFamily("queueadmin_handler_tasks",
                                    "Tasks finished per handler, by outcome",
                                    labels=["queue", "handler", "outcome"])
        runs = HistogramMetricFamily("queueadmin_task_duration_seconds",
                                     "Run time of the tasks done, per handler",
                                     labels=["queue", "handler"])
        try:
            rows = list(HandlerTotal.objects.order_by("queue", "handler"))
        except DatabaseError:
            rows = []  # the database is down: the queues' own series still go out
        bounds = [f"{ms / 1000:g}" for ms in BUCKETS_MS] + ["+Inf"]
        for row in rows:
            labels = [row.queue, row.handler]
            tasks.add_metric([*labels, "done"], row.done)
            tasks.add_metric([*labels, "failed"], row.failed)
            tasks.add_metric([*labels, "retried"], row.retried)
            counts = [int(n) for n in row.buckets[:NBUCKETS]]
            counts += [0] * (NBUCKETS - len(counts))
            cumulative, seen = [], 0
            for bound, n in zip(bounds, counts, strict=True):
                seen += n
                cumulative.append((bound, float(seen)))
            runs.add_metric(labels, cumulative, row.run_us / 1e6)
        yield from (tasks, runs)

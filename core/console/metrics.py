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

from .aggregates import QueueSummary, cached, mirror_lag, summary
from .queues import queue_names


def schedule_counts(queue: Queue) -> dict[str, int]:
    """The queue's recurring schedules by status: active, paused, ended (cached as the
    summaries are)."""
    return cached(f"schedules|{queue.keys.prefix}|{queue.name}", lambda: Schedules(queue).counts())


def _queue_families() -> dict[str, GaugeMetricFamily | CounterMetricFamily]:
    """The queues' metric families, in the order /metrics gives them."""
    gauge, counter = GaugeMetricFamily, CounterMetricFamily
    q = ["queue"]
    return {
        "up": gauge("queueadmin_redis_up", "Whether Redis answered", labels=[]),
        "waiting": gauge("queueadmin_waiting_tasks", "Tasks waiting", labels=[*q, "priority"]),
        "leased": gauge("queueadmin_leased_tasks", "Tasks leased to workers", labels=q),
        "expired": gauge("queueadmin_expired_leases",
                         "Leases past their expiry not recovered yet", labels=q),
        "delayed": gauge("queueadmin_delayed_tasks", "Tasks in retry backoff", labels=q),
        "dead": gauge("queueadmin_dead_letters", "Dead letters", labels=q),
        "requests": gauge("queueadmin_requests", "Requests by state", labels=[*q, "state"]),
        "workers": gauge("queueadmin_workers", "Registered workers", labels=[*q, "state"]),
        "totals": counter("queueadmin_tasks", "Tasks counted since the queue began",
                          labels=[*q, "outcome"]),
        "scheduled": gauge("queueadmin_scheduled_requests",
                           "Delayed requests waiting for their due time", labels=q),
        "due_soon": gauge("queueadmin_scheduled_due_next_hour",
                          "Delayed requests due within the hour (or overdue)", labels=q),
        "schedules": gauge("queueadmin_schedules",
                           "Recurring schedules by status (active, paused, ended)",
                           labels=[*q, "status"]),
        "mirror_lag": gauge(
            "queueadmin_mirror_lag_seconds",
            "How far the database's history is behind the queue: the age of the oldest event "
            "the mirror has not written yet (0 when caught up; absent before a mirror ran)",
            labels=q),
        "oldest_waiting": gauge(
            "queueadmin_oldest_waiting_seconds",
            "Age of the oldest waiting work: since the submit of the oldest request with tasks "
            "waiting (0 when none waits)", labels=q),
        "no_worker": gauge(
            "queueadmin_tasks_waiting_no_worker",
            "Waiting tasks of a handler that no live worker of the queue runs (they wait for "
            "one; no other worker leases them)", labels=[*q, "handler"]),
    }


def _add_queue(f: dict[str, GaugeMetricFamily | CounterMetricFamily], s: QueueSummary,
               by_status: dict[str, int], lag: float | None) -> None:
    """One queue's figures (its summary, its schedules by status, the mirror's lag) into the
    families."""
    name = s.name
    if lag is not None:
        f["mirror_lag"].add_metric([name], lag)
    f["scheduled"].add_metric([name], s.stats.scheduled)
    f["due_soon"].add_metric([name], s.stats.due_next_hour)
    for status, n in by_status.items():
        f["schedules"].add_metric([name, status], n)
    for prio, n in s.stats.waiting_by_priority.items():
        f["waiting"].add_metric([name, str(prio)], n)
    for handler, n in s.stats.unrunnable.items():
        f["no_worker"].add_metric([name, handler], n)
    oldest = s.oldest_waiting_ms
    f["oldest_waiting"].add_metric([name], 0 if oldest is None else
                                   max(0, s.now_ms - oldest) / 1000)
    f["leased"].add_metric([name], s.stats.leased)
    f["expired"].add_metric([name], s.expired_leases)
    f["delayed"].add_metric([name], s.stats.delayed)
    f["dead"].add_metric([name], s.stats.dead)
    for state, n in s.stats.requests_by_state.items():
        f["requests"].add_metric([name, state], n)
    f["workers"].add_metric([name, "live"], s.live_workers)
    f["workers"].add_metric([name, "stale"], s.stale_workers)
    for outcome in ("submitted", "done", "failed", "retried"):
        f["totals"].add_metric([name, outcome], s.stats.totals.get(outcome, 0))


class QueueCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        families = _queue_families()
        ok = 1
        try:
            queues = [get_queue(name) for name in queue_names()]
            summaries = [summary(q) for q in queues]
            counts = [schedule_counts(q) for q in queues]
            lags = [mirror_lag(q) for q in queues]
        except (RedisUnavailable, RedisReplyError):
            ok, summaries, counts, lags = 0, [], [], []
        for s, by_status, lag in zip(summaries, counts, lags, strict=True):
            _add_queue(families, s, by_status, lag)
        families["up"].add_metric([], ok)
        yield from families.values()


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

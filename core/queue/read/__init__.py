"""The engine's read side, by noun: one typed function per question, read through the
engine's indexes (never KEYS or SCAN), in one round trip where Redis allows. The console,
`queuestat`, the ops and the tests read a queue through these names:

    stats      a queue's figures (stats, attention, drained) and the queues there are
    requests   requests: one, a page by state, many by id; the queue's events; who holds a
               unique key
    tasks      a request's pending entries and its tasks' payloads
    progress   what running tasks report
    leases     the leased tasks across a queue
    limits     the limits on keys, with their use
    dead       dead letters
    workers    the worker registry, heartbeats, stopped workers
    results    a request's results
    scheduled  delayed requests
    metrics    per-handler metrics by minute
    views      a page's figures at one moment (request, workers and pending pages)
    server     the Redis server's own: whether it answers, its health, what it has spent
"""

from .dead import dead_letters, dead_letters_present, request_dead_letters
from .leases import LeasedEntry, LeasedPage, leased
from .limits import limit_starts, limits
from .metrics import MAX_METRIC_MINUTES, current_minute, handler_metrics
from .progress import RUNNING_READ, progress, running_progress, task_progress
from .requests import (
    events_after,
    events_since,
    request,
    requests,
    requests_many,
    unique_holder,
)
from .results import MAX_RESULTS_CURSOR, ResultsPage, all_results, result_text, results
from .scheduled import due_within, scheduled
from .server import RedisHealth, command_stats, cpu_seconds, ping, redis_health
from .stats import (
    Attention,
    QueueStats,
    attention,
    drained,
    queues,
    queues_beside,
    stats,
    totals,
)
from .tasks import first_payloads, pending, task_payloads
from .views import LeasedView, RequestView, WorkersView, leased_view, request_view, workers_view
from .workers import StoppedWorker, heartbeat, stopped_workers, worker, workers

__all__ = [
    "MAX_METRIC_MINUTES",
    "MAX_RESULTS_CURSOR",
    "RUNNING_READ",
    "Attention",
    "LeasedEntry",
    "LeasedPage",
    "LeasedView",
    "QueueStats",
    "RedisHealth",
    "RequestView",
    "ResultsPage",
    "StoppedWorker",
    "WorkersView",
    "all_results",
    "attention",
    "command_stats",
    "cpu_seconds",
    "current_minute",
    "dead_letters",
    "dead_letters_present",
    "drained",
    "due_within",
    "events_after",
    "events_since",
    "first_payloads",
    "handler_metrics",
    "heartbeat",
    "leased",
    "leased_view",
    "limit_starts",
    "limits",
    "pending",
    "ping",
    "progress",
    "queues",
    "queues_beside",
    "redis_health",
    "request",
    "request_dead_letters",
    "request_view",
    "requests",
    "requests_many",
    "result_text",
    "results",
    "running_progress",
    "scheduled",
    "stats",
    "stopped_workers",
    "task_payloads",
    "task_progress",
    "totals",
    "unique_holder",
    "worker",
    "workers",
    "workers_view",
]

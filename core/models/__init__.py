"""The console's durable history: what Redis forgets once a request's retention is over.

Redis holds the live queue; the first tables mirror it (`core.mirror`, run by `runmirror`) from
the queue's `events` and `dead` streams, so that finished requests, dead letters and the
counters behind the charts can be listed, filtered and grouped with indexed SQL long after
Redis has expired them. The mirror writes them; nothing else does, except the operator
actions that change what a row says (a dead letter requeued or deleted). The last two are
the operator actions' own: the audit log and the bulk actions (core.ops).
"""

from .actions import BULK_STATUSES, TYPED_COUNT_ABOVE, AuditEntry, BulkAction
from .alerts import AlertChannel, AlertIncident, AlertMessage, AlertRule
from .datajobs import DataJob, DataJobChunk  # noqa: F401  (re-exported)
from .history import STATE_CHOICES, DeadLetter, QueueSample, Request, RequestEvent
from .metrics import (  # _no_buckets: a default that migration 0010 names
    HandlerCounts,
    HandlerHour,
    HandlerMinute,
    HandlerTotal,
    MetricsCursor,
    _no_buckets,
)
from .mirror import MirrorPosition
from .retention import PruneRun, RetentionSetting
from .schedules import ScheduleRecord
from .search import SearchDoc
from .tokens import ApiToken

__all__ = [
    "BULK_STATUSES",
    "STATE_CHOICES",
    "TYPED_COUNT_ABOVE",
    "AlertChannel",
    "AlertIncident",
    "AlertMessage",
    "AlertRule",
    "ApiToken",
    "AuditEntry",
    "BulkAction",
    "DeadLetter",
    "HandlerCounts",
    "HandlerHour",
    "HandlerMinute",
    "HandlerTotal",
    "MetricsCursor",
    "MirrorPosition",
    "PruneRun",
    "QueueSample",
    "Request",
    "RequestEvent",
    "RetentionSetting",
    "ScheduleRecord",
    "SearchDoc",
    "_no_buckets",
]

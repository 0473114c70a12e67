"""The queueadmin engine: a Redis job queue with priorities, per-request concurrency limits,
fair share, fan-out with completion tracking, leases, retries and dead letters.

Imports nothing from Django, so producers in other services can use it as it is.
"""

# isort: off
from . import redispy  # noqa: F401  first: redis-py without OpenTelemetry's metrics SDK
# isort: on
from . import handlers
from .client import Queue
from .errors import (
    HandlerNotRun,
    InvalidInput,
    InvalidPayload,
    InvalidResult,
    LeaseLost,
    NotLeased,
    PayloadTooLarge,
    QueueadminError,
    QueueError,
    RedisReplyError,
    RedisUnavailable,
    RequestCancelled,
    RequestIdTaken,
    RequestSealed,
    ResultTooLarge,
    StateChanged,
    UnknownHandlerWarning,
    UnknownRequest,
    UnknownWorker,
)
from .models import Flow, Lease, RequestInfo, Submitted
from .options import FollowUp
from .results import Completion

__all__ = [
    "Completion",
    "Flow",
    "FollowUp",
    "HandlerNotRun",
    "InvalidInput",
    "InvalidPayload",
    "InvalidResult",
    "Lease",
    "LeaseLost",
    "NotLeased",
    "PayloadTooLarge",
    "Queue",
    "QueueError",
    "QueueadminError",
    "RedisReplyError",
    "RedisUnavailable",
    "RequestCancelled",
    "RequestIdTaken",
    "RequestInfo",
    "RequestSealed",
    "ResultTooLarge",
    "StateChanged",
    "Submitted",
    "UnknownHandlerWarning",
    "UnknownRequest",
    "UnknownWorker",
    "handlers",
]

"""The queueadmin engine: a Redis job queue with priorities, per-request concurrency limits,
fair share, fan-out with completion tracking, leases, retries and dead letters.

Imports nothing from Django, so producers in other services can use it as it is.
"""

from . import handlers
from .client import Queue
from .errors import (
    InvalidInput,
    InvalidPayload,
    LeaseLost,
    NotLeased,
    PayloadTooLarge,
    QueueadminError,
    QueueError,
    RedisReplyError,
    RedisUnavailable,
    RequestCancelled,
    RequestSealed,
    StateChanged,
    UnknownHandlerWarning,
    UnknownRequest,
    UnknownWorker,
)
from .models import Lease, RequestInfo, Submitted

__all__ = [
    "InvalidInput",
    "InvalidPayload",
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
    "RequestInfo",
    "RequestSealed",
    "StateChanged",
    "Submitted",
    "UnknownHandlerWarning",
    "UnknownRequest",
    "UnknownWorker",
    "handlers",
]

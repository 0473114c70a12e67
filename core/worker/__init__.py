"""Worker runtime: task slots, heartbeat, graceful shutdown, recovery of dead workers' tasks.

Django-free like the engine; `manage.py runworker` only parses options and calls run_worker().
"""

from .config import WorkerConfig
from .context import Cancelled, Interrupted, Permanent, TaskContext, Unavailable
from .registry import Registry, default_registry, handler
from .runtime import Worker

__all__ = [
    "Cancelled",
    "Interrupted",
    "Permanent",
    "Registry",
    "TaskContext",
    "Unavailable",
    "Worker",
    "WorkerConfig",
    "default_registry",
    "handler",
]

"""Worker runtime: task slots, heartbeat, graceful shutdown, recovery of dead workers' tasks.

Django-free like the engine; `manage.py runworker` only parses options and calls run_worker().
"""

from .context import Cancelled, Permanent, TaskContext, Unavailable
from .registry import Registry, default_registry, handler
from .runtime import Worker, WorkerConfig

__all__ = [
    "Cancelled",
    "Permanent",
    "Registry",
    "TaskContext",
    "Unavailable",
    "Worker",
    "WorkerConfig",
    "default_registry",
    "handler",
]

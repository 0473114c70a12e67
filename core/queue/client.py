"""The queue client: producers submit requests, consumers lease and finish tasks, operators
cancel, requeue and claim.

Plain Python on redis-py; usable without Django. Every state change is one Lua script
(see lua/), so a crash between two calls never loses a task. The parts live in their own
modules (produce, consume, operate); Queue puts them together.
"""

from __future__ import annotations

from .base import translated
from .consume import Consumer, wait_for_any
from .limits import Limits
from .operate import Operator
from .produce import Producer
from .records import Records

__all__ = ["Queue", "translated", "wait_for_any"]


class Queue(Producer, Consumer, Operator, Limits):
    """One named queue on one Redis (or Redis Cluster: all its keys share one hash tag)."""

    def records(self, kind: str) -> Records:
        """The application's records of `kind` beside this queue's requests (records.py)."""
        return Records(self, kind)

"""What a handler sees of its task, and how it learns that the task's request was cancelled."""

from __future__ import annotations

from typing import Any

from core.queue import Lease, Queue


class Cancelled(Exception):
    """Raised by TaskContext.check() when the task's request was cancelled. The worker then
    releases the task without counting a failure."""


class TaskContext:
    """One running (or prefetched) task. The heartbeat thread sets `cancelled` and `lost`."""

    __slots__ = ("cancelled", "finished", "lease", "lost", "queue", "worker")

    def __init__(self, lease: Lease, queue: Queue, worker: str) -> None:
        self.lease = lease
        self.queue = queue
        self.worker = worker
        self.cancelled = False  # the request is being cancelled: stop at the next checkpoint
        self.lost = False  # the lease is no longer ours: an ack would be refused
        self.finished = False  # the handler returned; its ack is on its way

    @property
    def payload(self) -> Any:
        return self.lease.payload

    @property
    def request_id(self) -> str:
        return self.lease.request_id

    @property
    def task_id(self) -> str:
        return self.lease.task_id

    @property
    def attempt(self) -> int:
        return self.lease.attempt

    def check(self) -> None:
        """A checkpoint for long handlers: raises Cancelled if the request was cancelled."""
        if self.cancelled:
            raise Cancelled(f"request {self.request_id} was cancelled")

    def __repr__(self) -> str:
        return f"<Task {self.queue.name}/{self.lease.lease} attempt={self.attempt}>"

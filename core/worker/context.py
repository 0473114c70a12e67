"""What a handler sees of its task, and how it learns that it must stop: the request was
cancelled, the lease was taken away, or the task ran past its hard time limit."""

from __future__ import annotations

import time
from typing import Any

from core.queue import Lease, Queue, QueueadminError

from .progress import Reporter


class WorkerError(QueueadminError):
    """Root of what the worker runtime raises, and of what a handler raises to tell the worker
    how to treat its task (Cancelled, LeaseGone, Permanent, Unavailable, TimeLimitExceeded)."""


class Cancelled(WorkerError):
    """Raised by TaskContext.check() when the task's request was cancelled. The worker then
    releases the task without counting a failure."""


class LeaseGone(WorkerError):
    """Raised by TaskContext.check() when this run no longer holds its lease (reaped, claimed
    or released by an operator): the task is to run again, so this run stops. The worker
    neither acks nor fails it; it tells Redis the run stopped, so that a task an operator
    released or claimed (kept from running again while this run may go on) moves on now."""


class Permanent(WorkerError):
    """Raised by a handler for a failure that running the task again cannot fix (bad input,
    a statement that does not parse): the task goes to the dead letters at once, whatever
    attempts it has left. Any exception whose `permanent` attribute is true counts alike."""

    permanent = True


class Unavailable(WorkerError):
    """Raised by a handler when something it needs is down (the Spark server it talks to): the
    task goes back to waiting at once, without counting an attempt, and the slot takes no more
    work until the handler's readiness check (Registry.register's `ready`) passes again."""


class Interrupted(WorkerError):
    """Raised by TaskContext.check() once the worker is stopping and its grace period is over
    (or a second signal came): the handler is to return now. The worker gives the task back
    (not counted as an attempt) only after the handler has returned, so the task never runs
    in two places at once; a handler that ignores check() ends with its process instead, and
    its lease expires or is reaped."""


class TimeLimitExceeded(WorkerError):
    """Raised by TaskContext.check() once the task has run past its hard time limit. The task
    has already been failed (retried or dead-lettered) by the heartbeat."""


# A lease known to be held until `valid_until` (monotonic seconds) is trusted without asking
# Redis until this long before then: covers clock-rate differences between hosts.
LEASE_MARGIN_S = 0.05


class TaskContext:
    """One running (or prefetched) task. The heartbeat sets `cancelled`, `lost`, `timed_out`
    and `valid_until`; the slot sets `deadline` and `time_limit` when the task starts."""

    __slots__ = ("_reporter", "cancelled", "deadline", "finished", "given_back", "interrupted",
                 "lease", "lost", "queue", "started", "time_limit", "timed_out", "valid_until",
                 "worker")

    def __init__(self, lease: Lease, queue: Queue, worker: str, valid_until: float = 0.0) -> None:
        self.lease = lease
        self.queue = queue
        self.worker = worker
        self.cancelled = False  # the request is being cancelled: stop at the next checkpoint
        self.lost = False  # the lease is no longer ours: an ack would be refused
        self.timed_out = False  # past the hard time limit: already failed by the heartbeat
        self.finished = False  # the handler returned; its ack is on its way
        # Set by the worker under its start lock (Worker._begin): a task is started by its
        # slot or given back unstarted by whoever decides first, never both.
        self.started = False
        self.given_back = False
        self.interrupted = False  # the worker's grace is over: stop at the next checkpoint
        # Monotonic time until which the lease is certainly held: the time the request that
        # leased (or last renewed) it was sent, plus the lease length.
        self.valid_until = valid_until
        self.deadline: float | None = None  # monotonic hard time limit, if any
        self.time_limit = 0.0  # the limit it came from (s), for the dead letter's message
        self._reporter: Reporter | None = None  # made by the first progress() or log()

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

    def renewed(self, sent_at: float, lease_ms: int) -> None:
        """A renewal sent at `sent_at` (monotonic) was accepted."""
        self.valid_until = max(self.valid_until, sent_at + lease_ms / 1000)

    def trusted(self) -> bool:
        """True while the lease is known to be held without asking Redis."""
        return not self.lost and time.monotonic() < self.valid_until - LEASE_MARGIN_S

    def confirm(self) -> bool:
        """Is the lease still held? Asks Redis (and renews it) only when not already known."""
        if self.lost:
            return False
        if self.trusted():
            return True
        sent = time.monotonic()
        [result] = self.queue.extend([self.lease.lease], self.lease.lease_ms)
        if result == -1:
            self.lost = True
            return False
        if result == 2:
            self.cancelled = True
        self.renewed(sent, self.lease.lease_ms)
        return True

    @property
    def stopping(self) -> bool:
        """Whether this run is to stop at its next checkpoint (cancelled, lease lost, failed by
        the heartbeat for running past its time limit, or the worker's grace over): what a
        handler that waits on something else polls, and what cancels a data job's Spark query
        (step.py)."""
        return self.cancelled or self.lost or self.interrupted or self.timed_out

    def check(self) -> None:
        """A checkpoint for long handlers: raises Cancelled if the request was cancelled,
        LeaseGone if the lease was taken away, TimeLimitExceeded past the time limit,
        Interrupted once the stopping worker's grace is over."""
        if self.cancelled:
            raise Cancelled(f"request {self.request_id} was cancelled")
        if self.interrupted:
            raise Interrupted(f"worker {self.worker} is stopping: task {self.task_id} of "
                              f"request {self.request_id} goes back to waiting")
        if self.timed_out or (self.deadline is not None and time.monotonic() > self.deadline):
            raise TimeLimitExceeded(f"task {self.task_id} ran past its time limit")
        if not self.confirm():
            raise LeaseGone(f"task {self.task_id} of request {self.request_id} is no longer "
                            f"leased to worker {self.worker}")

    def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Report how far the task is: `done` of `total` (None: unknown), with a short
        `message` (200 characters kept), shown live on the console's request and workers
        pages. Cheap to call often: at most one write every 0.5 s, the latest value kept
        meanwhile and sent within a heartbeat, or when the handler returns. Ignored once
        the lease is gone. InvalidInput for a negative or non-finite number."""
        self._reports().progress(done, total, str(message))

    def log(self, message: str) -> None:
        """Add a line (300 characters kept) to the task's log on the request page, which
        keeps its last 20 lines; written with progress, under the same rate limit."""
        self._reports().line(str(message))

    def flush_progress(self, *, due_only: bool = False) -> None:
        """Send what progress() and log() keep back (the worker calls it when the handler
        returns; the heartbeat with due_only, once the rate limit allows a write)."""
        if self._reporter is not None:
            self._reporter.flush(due_only=due_only)

    def _reports(self) -> Reporter:
        if self._reporter is None:
            self._reporter = Reporter(self)
        return self._reporter

    def __repr__(self) -> str:
        return f"<Task {self.queue.name}/{self.lease.lease} attempt={self.attempt}>"

"""A running task's progress and log lines on their way to Redis (ctx.progress, ctx.log):
rate-limited to one write per task every PROGRESS_INTERVAL_S, the latest value kept locally
meanwhile and sent with the next write, by the heartbeat once it is due, or when the handler
returns, so the last value reported is the one the console shows."""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import Protocol

from core.queue import Lease, Queue, RedisReplyError, RedisUnavailable
from core.queue.consume import LOG_LINES, progress_number

log = logging.getLogger("queueadmin.worker")

PROGRESS_INTERVAL_S = 0.5  # at most one write per task this often


class ReportingTask(Protocol):
    """What a Reporter reads of its task (context.TaskContext is one): named here, so that
    the context can make its reporter without the two modules importing each other."""

    lost: bool
    queue: Queue
    lease: Lease
    worker: str

    @property
    def request_id(self) -> str: ...
    @property
    def task_id(self) -> str: ...


class Reporter:
    """The unsent part of one task's reports; thread-safe (the handler's thread reports, the
    heartbeat flushes what is due). The lock is held across the write, so writes never
    overtake each other and a value is never sent twice."""

    __slots__ = ("_last", "_lines", "_lock", "_progress", "_refused", "ctx", "interval")

    def __init__(self, ctx: ReportingTask, interval: float = PROGRESS_INTERVAL_S) -> None:
        self.ctx = ctx
        self.interval = interval
        self._lock = threading.Lock()
        self._progress: tuple[float, float | None, str] | None = None
        self._lines: collections.deque[tuple[float, str]] = collections.deque(maxlen=LOG_LINES)
        self._last = -interval  # monotonic time of the last write
        self._refused = False  # the lease is gone: nothing more is sent

    def progress(self, done: float, total: float | None, message: str) -> None:
        progress_number(done, "done")  # a bad value is the handler's error, raised here
        if total is not None:
            progress_number(total, "total")
        with self._lock:
            self._progress = (done, total, message)
            self._send_if_due()

    def line(self, text: str) -> None:
        with self._lock:
            self._lines.append((time.monotonic(), text))
            self._send_if_due()

    def flush(self, *, due_only: bool = False) -> None:
        """Send what waits: now (the handler is over), or only if the interval has passed."""
        with self._lock:
            if due_only:
                self._send_if_due()
            else:
                self._send()

    def _send_if_due(self) -> None:
        if time.monotonic() - self._last >= self.interval:
            self._send()

    def _send(self) -> None:
        if self._refused or self.ctx.lost:  # the engine would refuse it: spare the trip
            self._progress = None
            self._lines.clear()
            return
        if self._progress is None and not self._lines:
            return
        now = time.monotonic()
        self._last = now
        ctx = self.ctx
        done, total, message = self._progress or (None, None, "")
        lines = [(int((now - at) * 1000), text) for at, text in self._lines]
        try:
            held = ctx.queue.progress(ctx.lease, done=done, total=total, message=message,
                                      lines=lines, worker=ctx.worker)
        except (RedisUnavailable, RedisReplyError) as exc:
            # Kept for the next write: a report is worth less than the task it describes.
            log.debug("progress not written queue=%s request=%s task=%s: %s",
                      ctx.queue.name, ctx.request_id, ctx.task_id, exc)
            return
        self._progress = None
        self._lines.clear()
        if not held:
            self._refused = True

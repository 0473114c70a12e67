"""A worker's span of each task run (the messaging conventions' "process" span), made at the
cost of a few microseconds on the task's path.

The run's own path only records (ids, times, outcome) and makes the run's context current, so
that spans its handler starts (a data job's stages, a library's instrumentation) are its
children. The span itself is made from that record afterwards, in batches, by a thread of
its own: where every span processor exports OTLP over HTTP, written straight as OTLP bytes
and posted by their exporters (otlp.py); otherwise built as an SDK ReadableSpan and handed to
the processors as the SDK's Tracer would hand them a span it ended (build.py). The SDK's
tracer costs 20-40 us a span (its attributes' checks, sampler, locks) and its OTLP encoder
~45 us, more than a worker's whole cost per no-op task (docs/tracing.md).

Parent and links (issue 38): a task's first delivery is a child of the producer's context
(the submit's send span); a redelivery (retry, operator requeue, a dead worker's task reaped,
a release) is a trace of its own that links to it. Sampling follows the producer's decision
(the traceparent's sampled flag); a run without one to follow is asked of the provider's
sampler as a root.
"""

from __future__ import annotations

import random
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from core.queue import Lease

BATCH = 512  # records that wake the building thread before its timer
EVERY_S = 0.5  # how often the thread builds what was recorded (for the provider's processors)
_getrandbits = random.getrandbits
_time_ns = time.time_ns


class Run:
    """What one run's span is built from."""

    __slots__ = ("end", "error", "failed", "lease", "queue", "sampled", "span_id", "start",
                 "token", "trace_id")

    def __init__(self, queue: str, lease: Lease, trace_id: int, span_id: int,
                 sampled: bool) -> None:
        self.queue, self.lease = queue, lease
        self.trace_id, self.span_id, self.sampled = trace_id, span_id, sampled
        self.start = _time_ns()
        self.end = 0
        self.error: tuple[str, str, str] | None = None  # type, message, traceback (failed)
        self.failed = False
        self.token: Any = None


class TaskSpans:
    """One worker's recorder of task runs (Worker.spans while tracing is on)."""

    def __init__(self, provider: Any, worker: str) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags

        self.provider, self.worker = provider, worker
        self._attach, self._detach = context.attach, context.detach
        self._in_context = trace.set_span_in_context
        self._span_of = NonRecordingSpan
        self._context = _span_contexts(SpanContext)
        self._flags = (TraceFlags(0), TraceFlags(1))
        self._consumer = SpanKind.CONSUMER
        self._root_sampled = _samples_roots_always(provider)
        self._records: deque[Run] = deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()  # one builder at a time (the thread, a flush)
        self._thread: threading.Thread | None = None
        from . import otlp
        from .build import Builder

        # Straight to OTLP bytes where every processor is an OTLP/HTTP batch one (otlp.py),
        # else ReadableSpans to the processors.
        exporters = otlp.otlp_exporters(provider)
        self._builder: Builder | otlp.DirectExport = (
            otlp.DirectExport(provider, worker, exporters) if exporters
            else Builder(provider, worker))
        # Records that wake the thread before its timer: a request's worth, to OTLP; and the
        # timer: the batch processors' own delay, to OTLP (their posts' fixed cost, ~1.5 ms
        # of CPU each on a slow machine, shared by the runs of that delay).
        self._batch = otlp.SPANS_PER_REQUEST if exporters else BATCH
        self._every = otlp.schedule_delay_s(provider) if exporters else EVERY_S

    def start(self, queue: str, lease: Lease) -> Run:
        """A run of `lease` starts now: its context is current until finish()."""
        tp = lease.trace
        if tp and lease.lease.endswith("/1"):  # its first delivery: the submit's child
            trace_id, sampled = int(tp[3:35], 16), tp[54] in "13579bdf"
        else:
            trace_id = _getrandbits(128)
            sampled = self._root_sampled or self._sampled(trace_id, queue)
        run = Run(queue, lease, trace_id, _getrandbits(64) or 1, sampled)
        run.token = self._attach(self._in_context(self._span_of(
            self._context(trace_id, run.span_id, self._flags[sampled]))))
        return run

    def finish(self, run: Run, exc: BaseException | None = None, *,
               failed: bool = False) -> None:
        """The run ended (its handler returned, or raised `exc`; `failed`: counted a
        failure, not a task given back unfinished)."""
        run.end = _time_ns()
        self._detach(run.token)
        run.token = None  # its context, span and token freed now, not kept with the record
        if not run.sampled:
            return
        if exc is not None:
            run.failed = failed
            run.error = (type(exc).__name__, str(exc),
                         "".join(traceback.format_exception(exc)) if failed else "")
        records = self._records
        records.append(run)
        if self._thread is None:
            self._start_thread()
        elif len(records) >= self._batch and not self._wake.is_set():  # set() takes a lock
            self._wake.set()

    def _sampled(self, trace_id: int, queue: str) -> bool:
        """The provider's sampler's decision for a run without a parent to follow."""
        result = self.provider.sampler.should_sample(None, trace_id, f"process {queue}",
                                                     self._consumer)
        return bool(result.decision.is_sampled())

    def flush(self) -> None:
        """Build and hand over every span recorded so far."""
        with self._lock:
            self._builder.build(self._records)

    def _start_thread(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="task-spans",
                                                daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            self._wake.wait(self._every)
            self._wake.clear()
            self.flush()


def _span_contexts(cls: Any) -> Callable[[int, int, Any], Any]:
    """A maker of the local SpanContext of a run, `cls(trace_id, span_id, False, flags)`,
    without its constructor's checks: the tuple it builds, made directly (0.3 against 0.9
    us), a trace id of 0 (a producer's invalid one) being invalid as there; the constructor
    itself where this SDK's SpanContext is not that tuple."""
    from opentelemetry.trace import DEFAULT_TRACE_STATE, TraceFlags

    new, state = tuple.__new__, DEFAULT_TRACE_STATE

    def direct(trace_id: int, span_id: int, flags: Any) -> Any:
        return new(cls, (trace_id, span_id, False, flags, state, trace_id != 0))

    def built(trace_id: int, span_id: int, flags: Any) -> Any:
        return cls(trace_id, span_id, False, flags)

    for ids in ((1 << 127) + 5, 7), (0, 7):
        a, b = direct(*ids, TraceFlags(1)), built(*ids, TraceFlags(1))
        if tuple(a) != tuple(b) or any(getattr(a, k) != getattr(b, k) for k in (
                "trace_id", "span_id", "is_remote", "trace_flags", "trace_state", "is_valid")):
            return built
    return direct


def _samples_roots_always(provider: Any) -> bool:
    """Whether the provider's sampler takes every root span (the default, parent-based on
    always-on): then a run without a parent is sampled without asking it."""
    sampler = getattr(provider, "sampler", None)
    description = sampler.get_description() if sampler is not None else ""
    return description.startswith(("ParentBased{root:AlwaysOnSampler", "AlwaysOnSampler"))


__all__ = ["Run", "TaskSpans"]

"""The spans of recorded task runs (runs.Run, typed Any here: runs.py imports this module),
built in batches off the tasks' path and handed to the tracer provider's span processors, as
its Tracer hands them a span that ended."""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from .producer import SYSTEM

log = logging.getLogger("queueadmin.tracing")
SCOPE = "queueadmin"


class Builder:
    """Makes ReadableSpans of runs for one worker of one provider."""

    def __init__(self, provider: Any, worker: str) -> None:
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

        self.provider, self.worker = provider, worker
        self._span, self._event, self._link = ReadableSpan, Event, Link
        self._context, self._flags = SpanContext, (TraceFlags(0), TraceFlags(1))
        self._kind = SpanKind.CONSUMER
        self._ok, self._error, self._status = (Status(StatusCode.UNSET), StatusCode.ERROR,
                                              Status)
        self._scope = InstrumentationScope(SCOPE)
        self._resource = provider.resource
        # What an SDK TracerProvider's tracer ends its spans into (no public way to reach it).
        self._processor = getattr(provider, "_active_span_processor", None)
        if self._processor is None:
            log.warning("tracer provider %r has no span processors queueadmin can reach: task "
                        "runs are not traced", type(provider).__name__)
        self._base: dict[str, dict[str, Any]] = {}  # queue -> its runs' common attributes

    def build(self, records: deque[Any]) -> None:
        """Hand a span of each record over (taking them out of `records`)."""
        processor = self._processor
        while records:
            run = records.popleft()
            if processor is not None:
                try:
                    processor.on_end(self._span_of(run))
                except Exception:  # a broken exporter must not stop the worker's tracing
                    log.exception("a task run's span could not be handed over")

    def _common(self, queue: str) -> dict[str, Any]:
        base = self._base.get(queue)
        if base is None:
            base = self._base[queue] = {
                "messaging.system": SYSTEM, "messaging.operation.type": "process",
                "messaging.operation.name": "process", "messaging.destination.name": queue,
                "messaging.client.id": self.worker,
            }
        return base

    def _span_of(self, run: Any) -> Any:
        lease = run.lease
        rid, tid, delivery = lease.lease.split("/")
        attrs = {**self._common(run.queue), "queueadmin.handler": lease.handler,
                 "messaging.message.id": tid, "queueadmin.request.id": rid,
                 "queueadmin.task.attempt": lease.attempt,
                 "queueadmin.task.delivery": int(delivery)}
        parent: Any = None
        links: tuple[Any, ...] = ()
        tp = lease.trace
        if tp:
            producer = self._context(int(tp[3:35], 16), int(tp[36:52], 16), True,
                                     self._flags[tp[54] in "13579bdf"])
            if delivery == "1":
                parent = producer
            else:  # a retry, requeue, reap or release: linked, not a child
                links = (self._link(producer, {"queueadmin.link": "submit"}),)
        events = []
        if lease.wait_ms >= 0:
            events.append(self._event("queueadmin.lease_wait",
                                      {"queueadmin.lease_wait_ms": lease.wait_ms}, run.start))
        status = self._ok
        if run.error is not None:
            kind, message, stack = run.error
            attrs["queueadmin.task.outcome"] = "failed" if run.failed else "given back"
            if run.failed:
                attrs["error.type"] = kind
                status = self._status(self._error, f"{kind}: {message}")
                events.append(self._event("exception", {
                    "exception.type": kind, "exception.message": message,
                    "exception.stacktrace": stack}, run.end))
        else:
            attrs["queueadmin.task.outcome"] = "done"
        return self._span(
            f"process {run.queue}",
            self._context(run.trace_id, run.span_id, False, self._flags[1]), parent,
            self._resource, attrs, tuple(events), links, self._kind, None, status, run.start,
            run.end, self._scope)

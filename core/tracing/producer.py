"""The producer's side: a submit's "send" span, whose context the engine keeps with the
request (tracehook.SENDING while tracing is on), and a context a front end received (the
HTTP API's `traceparent` header, the command line's TRACEPARENT) taken as its parent."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from core.queue.tracehook import parse_traceparent

from .live import STATE

SYSTEM = "queueadmin"


def traceparent_of(span_context: Any) -> str:
    """The W3C traceparent of an OpenTelemetry SpanContext."""
    return (f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-"
            f"{int(span_context.trace_flags) & 0xFF:02x}")


class _Sending:
    def __init__(self, span: Any) -> None:
        self.span = span
        ctx = span.get_span_context()
        self.traceparent = traceparent_of(ctx) if ctx.is_valid else ""

    def sent(self, request_id: str, tasks: int) -> None:
        self.span.set_attribute("queueadmin.request.id", request_id)
        self.span.set_attribute("messaging.batch.message_count", tasks)


@contextmanager
def sending(queue: str) -> Iterator[_Sending]:
    """The span of one submit into `queue` ("send <queue>", kind PRODUCER, a child of the
    current span): the messaging conventions' send span, whose context the request keeps."""
    from opentelemetry.trace import SpanKind

    with STATE.tracer.start_as_current_span(
        f"send {queue}", kind=SpanKind.PRODUCER,
        attributes={"messaging.system": SYSTEM, "messaging.operation.type": "send",
                    "messaging.operation.name": "send", "messaging.destination.name": queue},
    ) as span:
        yield _Sending(span)


def remote_context(traceparent: str) -> Any:
    """An OpenTelemetry Context whose current span is the (remote) one `traceparent` names,
    or None if it is not a valid one."""
    ids = parse_traceparent(traceparent)
    if ids is None:
        return None
    from opentelemetry import trace
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    ctx = SpanContext(int(ids[0], 16), int(ids[1], 16), True,
                      TraceFlags(int(traceparent[53:55], 16) & 0x01))
    return trace.set_span_in_context(NonRecordingSpan(ctx))


@contextmanager
def incoming(traceparent: str | None) -> Iterator[str | None]:
    """For a front end handed a producer's trace context (an HTTP `traceparent` header, the
    TRACEPARENT environment variable): yields the `traceparent=` to submit with. While
    tracing is on, the context becomes the parent of the submit's send span (yields None:
    the send span's own is kept); while off, it is kept as it came (yields it). An invalid
    one is ignored (W3C: a new trace starts), never refused."""
    valid = traceparent if traceparent and parse_traceparent(traceparent) else None
    if STATE.provider is None or valid is None:
        yield valid if STATE.provider is None else None
        return
    from opentelemetry import context

    token = context.attach(remote_context(valid))
    try:
        yield None
    finally:
        context.detach(token)

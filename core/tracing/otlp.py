"""Task runs' spans written straight to OTLP protobuf and posted by the provider's own OTLP/HTTP
exporters (issue 38: ≤ 5 µs of worker CPU per traced task).

The SDK's way cost a worker 55-60 µs a span (bench/bench_tracing.py): a ReadableSpan built, the
batch processor's queue, then the OTLP encoder making a protobuf message object per span, per
attribute and per value before serialising them; this way costs ~10 µs. A run's span has a
fixed shape (a name per queue, the same common attributes, a handful of ids and numbers), so
it is written here as bytes from the run's record, the constant parts encoded once; the
request's envelope (the provider's resource, the instrumentation scope) comes from the SDK's
own encoder, once.

It is used only where nothing can tell the difference: every span processor of the provider
is a BatchSpanProcessor handing spans to an OTLP/HTTP exporter (what `setup_from_env` builds
for `otlp`). Spans leave through that exporter's HTTP client, with its endpoint, headers,
compression, timeout, retries and TLS settings. Any other processor (an in-memory exporter,
the console's, a program's own) gets the SDK's ReadableSpans as before (build.py). The two
ways give the same protobuf message; tests/worker/test_worker_tracing_otlp.py compares them.
"""

from __future__ import annotations

import logging
import struct
from collections import deque
from collections.abc import Iterable
from typing import Any

from .producer import SYSTEM

log = logging.getLogger("queueadmin.tracing")

SPANS_PER_REQUEST = 4096  # spans in one export request (~2 MiB)
_fixed64 = struct.Struct("<Q").pack
_CONSUMER = 5  # Span.SpanKind.SPAN_KIND_CONSUMER
_LOCAL = b"\x85\x01" + struct.pack("<I", 0x100)  # flags: has is_remote, parent not remote
_REMOTE = b"\x85\x01" + struct.pack("<I", 0x300)  # flags: the parent is remote (a producer)
_LINK_FLAGS = b"\x35" + struct.pack("<I", 0x300)  # a link's flags (its context is remote)
_UNSET = b"\x7a\x00"  # Status{} (code UNSET)


def _varint(n: int) -> bytes:
    if n < 0x80:
        return bytes((n,))
    if n < 0x4000:
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    out = bytearray()
    n &= (1 << 64) - 1  # int64 as protobuf writes it: two's complement, 10 bytes if negative
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the payload's length, the payload."""
    return tag + _varint(len(payload)) + payload


def _key(key: str) -> bytes:
    """KeyValue.key, encoded once per attribute name."""
    return _field(b"\x0a", key.encode())


def _str_kv(key: bytes, value: str) -> bytes:
    """A KeyValue of a string: key + AnyValue{string_value}."""
    v = value.encode()
    n = len(v)
    if n < 0x7E:  # the common case, every length one byte: in one step
        return b"%s\x12%c\x0a%c%s" % (key, n + 2, n, v)
    return key + _field(b"\x12", _field(b"\x0a", v))


def _int_kv(key: bytes, value: int) -> bytes:
    """A KeyValue of an int: key + AnyValue{int_value}."""
    if 0 <= value < 0x80:
        return b"%s\x12\x02\x18%c" % (key, value)
    return key + _field(b"\x12", b"\x18" + _varint(value))


def _str_attr(key: bytes, value: str) -> bytes:
    """Span.attributes item of a string, in one step when every length is one byte."""
    v = value.encode()
    n = len(key) + len(v) + 4
    if n < 0x80:
        return b"\x4a%c%s\x12%c\x0a%c%s" % (n, key, len(v) + 2, len(v), v)
    return _attr(_str_kv(key, value))


def _attr(kv: bytes) -> bytes:
    """Span.attributes item."""
    n = len(kv)
    return b"\x4a%c%s" % (n, kv) if n < 0x80 else b"\x4a" + _varint(n) + kv


_K_MESSAGE = _key("messaging.message.id")
_K_REQUEST = _key("queueadmin.request.id")
_K_HANDLER = _key("queueadmin.handler")
_K_ATTEMPT = _key("queueadmin.task.attempt")
_K_DELIVERY = _key("queueadmin.task.delivery")
_K_OUTCOME = _key("queueadmin.task.outcome")
_K_ERROR_TYPE = _key("error.type")
_K_WAIT = _key("queueadmin.lease_wait_ms")
_K_LINK = _key("queueadmin.link")
_EV_WAIT_NAME = _field(b"\x12", b"queueadmin.lease_wait")
_EV_EXC_NAME = _field(b"\x12", b"exception")
_WAIT_KV = len(_K_WAIT) + 3  # + the value's bytes: the lease wait's KeyValue length
_WAIT_EVENT = 9 + len(_EV_WAIT_NAME) + 2 + _WAIT_KV  # + the value's bytes: its event's
_K_EXC = (_key("exception.type"), _key("exception.message"), _key("exception.stacktrace"))
_OUTCOMES = {o: _attr(_str_kv(_K_OUTCOME, o)) for o in ("done", "failed", "given back")}
_LINK_ATTRS = _field(b"\x22", _str_kv(_K_LINK, "submit"))
# For SpanWriter.span: a string attribute's length less its value's; the deliveries 1-15 (by
# text, and as the bytes span() reads); a run's outcome "done" and its status (unset).
_MESSAGE_KV = len(_K_MESSAGE) + 4
_REQUEST_KV = len(_K_REQUEST) + 4
_DELIVERIES = {str(n): _attr(_int_kv(_K_DELIVERY, n)) for n in range(1, 16)}
_FAST_DELIVERIES = {n.encode(): attr for n, attr in _DELIVERIES.items()}
_DONE_UNSET = _OUTCOMES["done"] + _UNSET
# Its fields: trace and span id, parent, the shared ones, start and end, the message and
# request ids, attempt, delivery, outcome and status, flags, the lease wait event.
_FAST_SPAN = (b"\x0a\x10%s\x12\x08%s%s%s\x39%s\x41%s"
              b"\x4a%c%s\x12%c\x0a%c%s\x4a%c%s\x12%c\x0a%c%s%s%s%s%s%s")


class SpanWriter:
    """Writes the span of a run (runs.Run) of one worker as OTLP protobuf bytes.

    A span's fields may come in any order (protobuf parsers take them so): the parts that
    every run of a queue and handler shares (name, kind, the common attributes and the
    handler's) are one piece of bytes, made once, and a run that ended without an error, with
    short ids, a small attempt and delivery and a lease wait under 16 s (or none known), a
    first delivery or one without a producer's context, is written in one formatting step
    (span); any other in steps (_span)."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._queues: dict[str, tuple[bytes, bytes]] = {}  # queue -> head, common attributes
        self._handlers: dict[str, bytes] = {}  # handler -> its attribute
        self._shared: dict[tuple[str, str], bytes] = {}  # (queue, handler) -> shared fields
        self._attempts = [_attr(_int_kv(_K_ATTEMPT, n)) for n in range(16)]
        self._waits: dict[int, bytes] = {}  # lease wait (ms) -> its event, less its time

    def _shared_of(self, queue: str, handler: str) -> bytes:
        head, common = self._queues.get(queue) or self._head(queue)
        shared = self._shared[queue, handler] = head + common + (
            self._handlers.get(handler) or self._handler(handler))
        return shared

    def _wait_event(self, wait: int) -> bytes:
        """Span.events item of the lease wait, ending with its time's tag (the time, 8 bytes,
        follows)."""
        value = _varint(wait)
        n = len(value)
        event = self._waits[wait] = b"\x5a%c%s\x1a%c%s\x12%c\x18%s\x09" % (
            _WAIT_EVENT + n, _EV_WAIT_NAME, _WAIT_KV + n, _K_WAIT, n + 1, value)
        return event

    def span(self, run: Any) -> bytes:
        """The Span message of `run`, with its field tag (a ScopeSpans.spans item)."""
        lease = run.lease
        rid, tid, delivery = lease.lease.encode().split(b"/")
        attempt, wait, tp = lease.attempt, lease.wait_ms, lease.trace
        lt, lr = len(tid), len(rid)
        if (run.error is not None or lt > 100 or lr > 100 or not 0 <= attempt < 16
                or wait >= 16_384 or delivery not in _FAST_DELIVERIES):
            return self._span(run)
        if not tp:
            parent, flags = b"", _LOCAL
        elif delivery == b"1":  # a child of the submit's span
            parent, flags = b"\x22\x08" + bytes.fromhex(tp[36:52]), _REMOTE
        else:  # linked, not a child: the general way
            return self._span(run)
        start = _fixed64(run.start)
        body = _FAST_SPAN % (
            run.trace_id.to_bytes(16, "big"), run.span_id.to_bytes(8, "big"), parent,
            self._shared.get((run.queue, lease.handler))
            or self._shared_of(run.queue, lease.handler),
            start, _fixed64(run.end),
            lt + _MESSAGE_KV, _K_MESSAGE, lt + 2, lt, tid,
            lr + _REQUEST_KV, _K_REQUEST, lr + 2, lr, rid,
            self._attempts[attempt], _FAST_DELIVERIES[delivery], _DONE_UNSET, flags,
            b"" if wait < 0 else (self._waits.get(wait) or self._wait_event(wait)) + start)
        n = len(body)
        if 0x80 <= n < 0x4000:  # the usual length: two bytes
            return b"\x12%c%c%s" % ((n & 0x7F) | 0x80, n >> 7, body)
        return b"\x12" + _varint(n) + body

    def _head(self, queue: str) -> tuple[bytes, bytes]:
        """A queue's span name and kind (fields 5, 6), and its runs' common attributes."""
        common = (("messaging.system", SYSTEM), ("messaging.operation.type", "process"),
                  ("messaging.operation.name", "process"),
                  ("messaging.destination.name", queue), ("messaging.client.id", self.worker))
        head = self._queues[queue] = (
            _field(b"\x2a", f"process {queue}".encode()) + b"\x30" + _varint(_CONSUMER),
            b"".join(_attr(_str_kv(_key(k), v)) for k, v in common))
        return head

    def _handler(self, handler: str) -> bytes:
        attr = self._handlers[handler] = _attr(_str_kv(_K_HANDLER, handler))
        return attr

    def _span(self, run: Any) -> bytes:
        """span() of any run, in steps."""
        lease = run.lease
        rid, tid, delivery = lease.lease.split("/")
        head, common = self._queues.get(run.queue) or self._head(run.queue)
        start = _fixed64(run.start)
        end = _fixed64(run.end)
        tp = lease.trace
        first = delivery == "1"
        attempt = lease.attempt
        wait = lease.wait_ms
        if wait >= 0:  # the lease wait event, every length one byte
            value = _varint(wait)
            n = len(value)
            events = b"\x5a%c\x09%s%s\x1a%c%s\x12%c\x18%s" % (
                _WAIT_EVENT + n, start, _EV_WAIT_NAME, _WAIT_KV + n, _K_WAIT, n + 1, value)
        else:
            events = b""
        status = _UNSET
        if run.error is None:
            outcome = _OUTCOMES["done"]
        else:
            kind, message, stack = run.error
            outcome = _OUTCOMES["failed" if run.failed else "given back"]
            if run.failed:
                outcome += _attr(_str_kv(_K_ERROR_TYPE, kind))
                status = _field(b"\x7a", _field(b"\x12", f"{kind}: {message}".encode())
                                + b"\x18\x02")
                events += _field(b"\x5a", b"\x09" + end + _EV_EXC_NAME + b"".join(
                    _field(b"\x1a", _str_kv(k, v))
                    for k, v in zip(_K_EXC, (kind, message, stack), strict=True)))
        if not tp:
            parent, flags = b"", _LOCAL
        elif first:  # a child of the submit's span
            parent, flags = b"\x22\x08" + bytes.fromhex(tp[36:52]), _REMOTE
        else:  # a retry, requeue, reap or release: linked, not a child
            parent, flags = b"", _LOCAL
            events += _field(b"\x6a", b"\x0a\x10" + bytes.fromhex(tp[3:35]) + b"\x12\x08"
                             + bytes.fromhex(tp[36:52]) + _LINK_ATTRS + _LINK_FLAGS)
        body = b"\x0a\x10%s\x12\x08%s%s%s\x39%s\x41%s%s%s%s%s%s%s%s%s%s%s" % (
            run.trace_id.to_bytes(16, "big"), run.span_id.to_bytes(8, "big"), parent,
            head, start, end, common,
            self._handlers.get(lease.handler) or self._handler(lease.handler),
            _str_attr(_K_MESSAGE, tid), _str_attr(_K_REQUEST, rid),
            self._attempts[attempt] if 0 <= attempt < 16 else _attr(
                _int_kv(_K_ATTEMPT, attempt)),
            _DELIVERIES.get(delivery) or _attr(_int_kv(_K_DELIVERY, int(delivery))),
            outcome, events, status, flags)
        return b"\x12" + _varint(len(body)) + body


class Envelope:
    """An ExportTraceServiceRequest around written spans: the provider's resource and the
    instrumentation scope, encoded once by the SDK's own encoder."""

    def __init__(self, resource: Any, scope: Any) -> None:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext

        probe = ReadableSpan("probe", SpanContext(1, 1, False), resource=resource,
                             instrumentation_scope=scope)
        rs = encode_spans([probe]).resource_spans[0]
        ss = rs.scope_spans[0]
        self._resource = _field(b"\x0a", rs.resource.SerializeToString())
        self._resource_tail = _field(b"\x1a", rs.schema_url.encode()) if rs.schema_url else b""
        self._scope = _field(b"\x0a", ss.scope.SerializeToString())
        self._scope_tail = _field(b"\x1a", ss.schema_url.encode()) if ss.schema_url else b""

    def request(self, spans: Iterable[bytes]) -> bytes:
        scope_spans = _field(b"\x12", self._scope + b"".join(spans) + self._scope_tail)
        return _field(b"\x0a", self._resource + scope_spans + self._resource_tail)


def otlp_exporters(provider: Any) -> list[Any] | None:
    """The provider's OTLP/HTTP exporters when every span processor it has is a batch
    processor of one (then spans written here reach everything a ReadableSpan would); None
    otherwise, or where this SDK's exporter is not the one this module knows (its HTTP client,
    `_client.export(bytes)`, is what its own export() posts an encoded request with)."""
    try:
        from opentelemetry.exporter.otlp.proto.common import trace_encoder
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        return None
    if not callable(getattr(trace_encoder, "encode_spans", None)):  # Envelope's
        return None
    processors = getattr(getattr(provider, "_active_span_processor", None),
                         "_span_processors", None)
    if not processors:
        return None
    exporters = []
    for processor in processors:
        if type(processor) is not BatchSpanProcessor:
            return None
        exporter = getattr(processor, "span_exporter", None)
        if type(exporter) is not OTLPSpanExporter or not callable(
                getattr(getattr(exporter, "_client", None), "export", None)):
            return None
        exporters.append(exporter)
    return exporters


def schedule_delay_s(provider: Any, default: float = 5.0) -> float:
    """How often written spans are posted: the shortest delay of the provider's batch
    processors (OTEL_BSP_SCHEDULE_DELAY, 5 s by default), as they would post ReadableSpans;
    `default` where this SDK keeps it elsewhere."""
    delays = []
    processors = getattr(provider, "_active_span_processor", None)
    for processor in getattr(processors, "_span_processors", ()):
        delay = getattr(getattr(processor, "_batch_processor", None), "_schedule_delay", None)
        if isinstance(delay, (int, float)) and delay > 0:
            delays.append(float(delay))
    return min(delays, default=default)


class DirectExport:
    """Writes runs' spans and posts them through the provider's OTLP/HTTP exporters' clients,
    SPANS_PER_REQUEST at most in one request."""

    def __init__(self, provider: Any, worker: str, exporters: list[Any]) -> None:
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from .build import SCOPE

        self.exporters = exporters
        self.writer = SpanWriter(worker)
        self.envelope = Envelope(provider.resource, InstrumentationScope(SCOPE))

    def build(self, records: deque[Any]) -> None:
        """Post the span of each record (taking them out of `records`)."""
        span = self.writer.span
        while records:
            batch: list[bytes] = []
            while records and len(batch) < SPANS_PER_REQUEST:
                run = records.popleft()
                try:
                    batch.append(span(run))
                except Exception:  # one odd record must not stop the thread (nor the rest)
                    log.exception("the span of a run of %r could not be written",
                                  getattr(run.lease, "lease", "?"))
            if batch:
                self._post(self.envelope.request(batch), len(batch))

    def _post(self, data: bytes, n: int) -> None:
        for exporter in self.exporters:
            if getattr(exporter, "_shutdown", False):  # the provider was shut down
                continue
            try:  # a request not accepted is logged by the exporter's client
                exporter._client.export(data)
            except Exception:  # a broken exporter must not stop the worker's tracing
                log.exception("%d task run spans could not be exported", n)

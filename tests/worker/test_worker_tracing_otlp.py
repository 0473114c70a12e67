"""Task runs' spans written straight to OTLP (core/tracing/otlp.py, issue 38's cost): the bytes
are the message the SDK's own encoder makes of the same run; the way is taken only where every
span processor is an OTLP/HTTP batch one; a real `runworker` exports through it to a collector
that decodes what it receives."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from core.queue import Lease, Queue
from core.tracing import config
from core.tracing.build import SCOPE, Builder
from core.tracing.otlp import DirectExport, Envelope, SpanWriter
from core.tracing.runs import Run, TaskSpans

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
LONG = "x" * 300 + "é"  # lengths past one byte, and UTF-8


def _run(queue: str, lease: str, *, attempt: int = 1, handler: str = "noop", tp: str = TP,
         wait_ms: int = 3, error: tuple[str, str, str] | None = None,
         failed: bool = False) -> Run:
    run = Run(queue, Lease(lease, attempt, None, handler, 30_000, tp, wait_ms),
              (1 << 127) + 12345, (1 << 63) + 678, True)
    run.end = run.start + 1_234_567
    run.error, run.failed = error, failed
    return run


RUNS = {
    "first delivery, a child of the submit": _run("q", "r1/1-0/1"),
    "a redelivery, linked": _run("q", "r1/1-0/2", attempt=2, wait_ms=250_000),
    "without a producer's context": _run("default", "r2/5-1/1", tp="", wait_ms=-1),
    "without one, delivered again, a wait known": _run("q", "r2/5-1/3", tp="", wait_ms=0),
    "a first delivery after a wait of two bytes": _run("q", "r5/2-3/1", attempt=15,
                                                       wait_ms=16_383),
    "a first delivery after a longer wait": _run("q", "r5/2-3/1", wait_ms=16_384),
    "ids of 100 bytes": _run("q", f"{'r' * 100}/{'t' * 100}/1"),
    "ids of 100 and 101 bytes": _run("q", f"{'r' * 100}/{'t' * 101}/1"),
    "failed": _run("q", "r3/7-0/3", attempt=3,
                   error=("ValueError", "bad é input", "Traceback (most recent call last):\n"),
                   failed=True),
    "given back": _run("q", "r4/8-0/1", error=("Stopped", "stopping", ""), failed=False),
    "long values, large numbers": _run(LONG, f"{LONG}/{LONG}/17", attempt=300,
                                       handler=LONG, wait_ms=2**40,
                                       error=(LONG, LONG, LONG * 20), failed=True),
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_runs_span_written_as_otlp_is_the_message_the_sdk_encodes(name: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "svc", "k": LONG}))
    run = RUNS[name]
    sdk = encode_spans([Builder(provider, "w1")._span_of(run)])
    envelope = Envelope(provider.resource, InstrumentationScope(SCOPE))
    written = ExportTraceServiceRequest.FromString(
        envelope.request([SpanWriter("w1").span(run)]))
    assert written == sdk
    assert written.resource_spans[0].scope_spans[0].spans[0].name == f"process {run.queue}"


def test_many_runs_go_in_one_request_in_their_order() -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    runs = list(RUNS.values()) * 3
    writer = SpanWriter("w1")
    written = ExportTraceServiceRequest.FromString(
        Envelope(provider.resource, InstrumentationScope(SCOPE)).request(
            [writer.span(r) for r in runs]))
    assert written == encode_spans([Builder(provider, "w1")._span_of(r) for r in runs])


@pytest.mark.parametrize(("exporters", "direct"), [
    ("otlp", True),
    ("otlp,otlp", True),
    ("console", False),
    ("otlp,console", False),
])
def test_the_direct_way_is_taken_only_where_every_processor_exports_otlp(
    exporters: str, direct: bool
) -> None:
    provider = config.build_provider({"OTEL_TRACES_EXPORTER": exporters,
                                      "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9"})
    try:
        assert isinstance(TaskSpans(provider, "w1")._builder, DirectExport) is direct
        if direct:  # a processor of another kind added later: ReadableSpans again
            provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
            assert not isinstance(TaskSpans(provider, "w1")._builder, DirectExport)
    finally:
        provider.shutdown()


def test_a_bare_batch_processor_of_another_exporter_keeps_the_sdks_way() -> None:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    try:
        assert not isinstance(TaskSpans(provider, "w1")._builder, DirectExport)
    finally:
        provider.shutdown()


class _Collector(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint keeping what it decodes (the class's `requests`)."""

    requests: list[tuple[str, ExportTraceServiceRequest]] = []
    tenants: list[str | None] = []  # each request's x-tenant header
    status = 200

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).requests.append((self.path, ExportTraceServiceRequest.FromString(body)))
        type(self).tenants.append(self.headers.get("x-tenant"))
        self.send_response(type(self).status)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[type[_Collector]]:
    handler = type("Collector", (_Collector,), {"requests": [], "tenants": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)  # quick stop
    thread.start()
    handler.url = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield handler
    server.shutdown()
    server.server_close()


def test_a_worker_exports_its_runs_to_an_otlp_endpoint(
    live_queue: Queue, spawn_worker: Any, monkeypatch: pytest.MonkeyPatch,
    collector: Any
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "worker-under-test")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=t1")
    live_queue.submit([{}, {}, {}], request_id="r", handler="noop", traceparent=TP)
    live_queue.submit([{"error": "boom"}], request_id="f", handler="fail", traceparent=TP,
                      max_attempts=1)
    assert spawn_worker("on", "--burst").wait(60) == 0
    spans = {}
    for path, request in collector.requests:
        assert path == "/v1/traces"
        for rs in request.resource_spans:
            resource = {a.key: a.value.string_value for a in rs.resource.attributes}
            assert resource["service.name"] == "worker-under-test"
            for ss in rs.scope_spans:
                for span in ss.spans:
                    if span.name == "process q":
                        attrs = {a.key: a.value for a in span.attributes}
                        key = (attrs["queueadmin.request.id"].string_value,  # a task id is
                               attrs["messaging.message.id"].string_value)  # its request's
                        spans[key] = (span, attrs)
    assert len(spans) == 4, collector.requests
    assert set(collector.tenants) == {"t1"}  # the exporter's own settings apply
    for span, attrs in spans.values():
        assert span.trace_id.hex() == TP[3:35] and span.parent_span_id.hex() == TP[36:52]
        assert attrs["messaging.client.id"].string_value == "on"
        assert span.events[0].name == "queueadmin.lease_wait"
        assert span.end_time_unix_nano >= span.start_time_unix_nano > 0
    outcomes = sorted((attrs["queueadmin.request.id"].string_value,
                       attrs["queueadmin.task.outcome"].string_value, span.status.code)
                      for span, attrs in spans.values())
    assert outcomes == [("f", "failed", 2)] + [("r", "done", 0)] * 3


@pytest.mark.parametrize(("environ", "every_s"), [({}, 5.0),
                                                   ({"OTEL_BSP_SCHEDULE_DELAY": "250"}, 0.25)])
def test_written_spans_leave_as_often_as_the_batch_processor_would_post_them(
    environ: dict[str, str], every_s: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    provider = config.build_provider({"OTEL_TRACES_EXPORTER": "otlp"})
    try:
        spans = TaskSpans(provider, "w1")
        assert isinstance(spans._builder, DirectExport)
        assert spans._every == every_s
    finally:
        provider.shutdown()


def test_a_runs_local_context_is_the_one_the_sdk_would_make() -> None:
    from opentelemetry.trace import SpanContext, TraceFlags

    from core.tracing.runs import _span_contexts

    make = _span_contexts(SpanContext)
    for trace_id, span_id, flags in (((1 << 128) - 1, (1 << 64) - 1, 1), (1, 1, 0), (0, 5, 1)):
        made = make(trace_id, span_id, TraceFlags(flags))
        sdk = SpanContext(trace_id, span_id, False, TraceFlags(flags))
        assert made == sdk and made.is_valid == sdk.is_valid and made.trace_state == sdk.trace_state
        assert type(made) is SpanContext and made.is_remote is False


def test_a_run_whose_span_cannot_be_written_is_logged_and_the_rest_go(
    collector: Any, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{collector.url}/v1/traces")
    provider = config.build_provider({"OTEL_TRACES_EXPORTER": "otlp"})
    try:
        spans = TaskSpans(provider, "w1")
        assert isinstance(spans._builder, DirectExport)
        odd = _run("q", "no-slashes")  # a lease token of another shape
        spans._records.extend([RUNS["first delivery, a child of the submit"], odd,
                               RUNS["failed"]])
        spans.flush()
    finally:
        provider.shutdown()
    assert "could not be written" in caplog.text and "no-slashes" in caplog.text
    ((path, request),) = collector.requests
    assert path == "/v1/traces"
    assert [s.name for s in request.resource_spans[0].scope_spans[0].spans] == ["process q"] * 2

"""Tracing through real workers (issue 38): the SDK's in-memory exporter behind core.tracing,
an in-process worker on the suite's Redis; and `runworker` processes, with tracing off (it
imports nothing of OpenTelemetry) and on from the OTEL_* settings alone."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from core import tracing
from core.queue import Queue, read
from core.tracing.live import STATE
from core.worker import Registry, Worker, WorkerConfig

TP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Running:
    """A Worker running in a thread (run() installs no signal handlers there)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.thread = threading.Thread(target=worker.run, name=f"test-{worker.name}",
                                       daemon=True)
        self.thread.start()

    def join(self, timeout: float) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()


@pytest.fixture
def start() -> Iterator[Any]:
    """start(queue, registry, **config) -> Running; stopped hard and joined at teardown."""
    running: list[Running] = []

    def make(queue: Queue, registry: Registry, **config: Any) -> Running:
        config.setdefault("dead_after", 1.0)
        running.append(Running(Worker([queue], WorkerConfig(**config), registry)))
        return running[-1]

    yield make
    for r in running:
        r.worker.stop(hard=True)
        r.join(10)


def runs(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    tracing.flush()
    out = [s for s in exporter.get_finished_spans() if s.name == "process q"]
    return sorted(out, key=lambda s: s.start_time or 0)


def test_each_run_is_a_child_of_its_submit_with_the_messaging_attributes(
    live_queue: Queue, start: Any, spans: InMemorySpanExporter
) -> None:
    registry = Registry()
    registry.register("rec", lambda payload, ctx: None)
    sub = live_queue.submit([1, 2, 3], request_id="r", handler="rec")
    (send,) = [s for s in spans.get_finished_spans() if s.name == "send q"]
    assert send.kind == SpanKind.PRODUCER
    assert dict(send.attributes or {})["queueadmin.request.id"] == sub.request_id
    kept = read.request(live_queue, "r").traceparent  # the send span's context, kept by Redis
    assert kept == tracing.traceparent_of(send.context)
    w = start(live_queue, registry, name="w1", burst=True)
    assert w.join(10)
    got = runs(spans)
    assert len(got) == 3
    for span in got:
        assert span.kind == SpanKind.CONSUMER
        assert span.parent is not None and span.parent.span_id == send.context.span_id
        assert span.context.trace_id == send.context.trace_id
        attrs = dict(span.attributes or {})
        assert {k: attrs[k] for k in ("messaging.system", "messaging.operation.type",
                                      "messaging.destination.name", "messaging.client.id",
                                      "queueadmin.request.id", "queueadmin.task.attempt",
                                      "queueadmin.task.outcome")} == {
            "messaging.system": "queueadmin", "messaging.operation.type": "process",
            "messaging.destination.name": "q", "messaging.client.id": "w1",
            "queueadmin.request.id": "r", "queueadmin.task.attempt": 1,
            "queueadmin.task.outcome": "done"}
        (wait,) = [e for e in span.events if e.name == "queueadmin.lease_wait"]
        assert wait.attributes is not None and wait.attributes["queueadmin.lease_wait_ms"] >= 0
    ids = {str(s.attributes["messaging.message.id"]) for s in got if s.attributes}
    assert len(ids) == 3 and all(i.split("-")[0].isdigit() for i in ids)  # the tasks' ids


def test_a_follow_up_submitted_after_is_sent_in_a_span_of_its_own(
    live_queue: Queue, spans: InMemorySpanExporter
) -> None:
    live_queue.submit([1], request_id="p", handler="rec")
    live_queue.submit_after("p", [2], request_id="f", handler="rec")
    sends = {dict(s.attributes or {})["queueadmin.request.id"]: s
             for s in spans.get_finished_spans() if s.name == "send q"}
    assert set(sends) == {"p", "f"}
    assert read.request(live_queue, "f").traceparent == tracing.traceparent_of(
        sends["f"].context)


def test_a_retry_is_its_own_trace_linked_to_the_submit_and_a_failure_is_an_error(
    live_queue: Queue, start: Any, spans: InMemorySpanExporter
) -> None:
    seen: list[int] = []

    def flaky(payload: Any, ctx: Any) -> None:
        seen.append(ctx.lease.attempt)
        if ctx.lease.attempt == 1:
            raise ValueError("first try fails")

    registry = Registry()
    registry.register("flaky", flaky)
    live_queue.submit(["x"], request_id="r", handler="flaky", traceparent=TP, backoff_ms=0)
    w = start(live_queue, registry, name="w1", burst=True)
    assert w.join(10)
    first, second = runs(spans)
    assert first.parent is not None and f"{first.parent.span_id:016x}" == TP[36:52]
    assert f"{first.context.trace_id:032x}" == TP[3:35]
    assert first.status.status_code == StatusCode.ERROR
    assert "first try fails" in (first.status.description or "")
    assert [e.name for e in first.events][-1] == "exception"
    assert first.attributes is not None and first.attributes["error.type"] == "ValueError"
    assert second.parent is None  # a trace of its own...
    assert f"{second.context.trace_id:032x}" != TP[3:35]
    (link,) = second.links  # ...linked to the submit
    assert f"{link.context.span_id:016x}" == TP[36:52]
    assert second.attributes is not None and second.attributes["queueadmin.task.attempt"] == 2
    assert second.status.status_code == StatusCode.UNSET


def test_an_operator_requeue_runs_linked_and_a_handlers_own_spans_are_its_children(
    live_queue: Queue, start: Any, spans: InMemorySpanExporter
) -> None:
    tracer = STATE.provider.get_tracer("handler")  # the test's, as a program's global one

    def work(payload: Any, ctx: Any) -> None:
        with tracer.start_as_current_span("inner"):  # under the current span: the run's
            if payload == "bad" and ctx.lease.delivery == 1:
                raise ValueError("dead at once")

    registry = Registry()
    registry.register("work", work)
    live_queue.submit(["bad"], request_id="r", handler="work", traceparent=TP, max_attempts=1)
    w = start(live_queue, registry, name="w1", burst=True)
    assert w.join(10)
    dead = read.dead_letters(live_queue)
    assert len(dead) == 1
    assert live_queue.requeue([dead[0].id]) == (1, 0)
    w = start(live_queue, registry, name="w2", burst=True)
    assert w.join(10)
    first, requeued = runs(spans)
    assert requeued.parent is None and len(requeued.links) == 1
    assert requeued.attributes is not None and requeued.attributes["messaging.client.id"] == "w2"
    inner = [s for s in spans.get_finished_spans() if s.name == "inner"]
    assert {(s.parent.span_id if s.parent else None) for s in inner} == {
        first.context.span_id, requeued.context.span_id}


def test_an_idle_worker_handed_a_task_traces_it_as_a_child(
    live_queue: Queue, start: Any, spans: InMemorySpanExporter, wait_until: Any
) -> None:
    registry = Registry()
    registry.register("rec", lambda payload, ctx: None)
    w = start(live_queue, registry, name="idle")
    wait_until(lambda: live_queue.redis.zcard(live_queue.keys.idle), 10, "the worker idle")
    live_queue.submit(["a"], request_id="r", handler="rec", traceparent=TP)
    wait_until(lambda: live_queue.wait("r", timeout=0) == "done", 10, "the task done")
    w.worker.stop()
    assert w.join(10)
    (span,) = runs(spans)
    assert span.parent is not None and f"{span.parent.span_id:016x}" == TP[36:52]


def test_a_worker_with_tracing_off_adds_no_opentelemetry_import_and_no_span_work(
    live_queue: Queue, spawn_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
                 "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    # Not even redis-py's metrics' imports (the engine answers them "not installed":
    # core/queue/redispy.py), running traced requests.
    live_queue.submit([{} for _ in range(200)], request_id="r", handler="otel_modules",
                      traceparent=TP)
    proc = spawn_worker("off", "--burst")
    assert proc.wait(60) == 0
    assert live_queue.wait("r", timeout=0) == "done"
    results = read.results(live_queue, "r", count=500).items
    assert len(results) == 200
    seen = {text for _, text in results}
    assert len(seen) == 1, "a task imported something the first one had not"
    loaded = json.loads(seen.pop())
    assert "core.tracing.runs" not in loaded
    assert [m for m in loaded if m.startswith("opentelemetry")] == []


def test_a_worker_traces_from_the_otel_settings_alone(
    live_queue: Queue, spawn_worker: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "worker-under-test")
    live_queue.submit([{}, {}], request_id="r", handler="otel_modules", traceparent=TP)
    proc = spawn_worker("on", "--burst")
    assert proc.wait(60) == 0
    text = (tmp_path / "on.log").read_text()
    found, decoder, at = [], json.JSONDecoder(), 0
    while (at := text.find("{", at)) >= 0:  # the console exporter's JSON, among log lines
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at += 1
            continue
        if isinstance(value, dict) and value.get("name") == "process q":
            found.append(value)
        at = end
    assert len(found) == 2, text[-2000:]
    for span in found:
        assert span["parent_id"] == "0x" + TP[36:52]
        assert span["context"]["trace_id"] == "0x" + TP[3:35]
        assert span["resource"]["attributes"]["service.name"] == "worker-under-test"


@pytest.mark.parametrize(("env", "on"), [
    ({}, False),
    ({"OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "console,none"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "true"}, False),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "TRUE"}, False),
])
def test_tracing_is_on_only_when_the_otel_settings_name_an_exporter_or_endpoint(
    env: dict[str, str], on: bool
) -> None:
    assert tracing.configured(env) is on


def test_a_worker_process_keeps_what_it_made_to_start_out_of_the_collectors_sight(
    live_queue: Queue, spawn_worker: Any
) -> None:
    live_queue.submit([{}], request_id="g", handler="gc_frozen")
    assert spawn_worker("frozen", "--burst").wait(60) == 0
    ((_, text),) = read.results(live_queue, "g", count=10).items
    assert int(text) > 10_000  # Django, the engine, the handlers' modules

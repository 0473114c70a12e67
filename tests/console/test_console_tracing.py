"""Tracing in the console and its front ends (issue 38): the request page shows the trace id
of the producer's context (a link when a tracing UI is configured), from Redis and, once Redis
has forgotten the request, from its history; the search box finds the request by it; the HTTP
API keeps a `traceparent` header's context and the command line TRACEPARENT's."""

from __future__ import annotations

import io
import re
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from core import tracing
from core.queue import Queue, handlers, read
from tests.api_support import API, Caller, token_for
from tests.mirror_support import finish, mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]
TRACE = "0af7651916cd43dd8448eb211c80319c"
TP = f"00-{TRACE}-b7ad6b7169203331-01"


@pytest.fixture
def api_operator(db: Any) -> Caller:
    return token_for("otto", "operator", "operate")


def trace_row(viewer: Client, rid: str) -> str:
    body = viewer.get(f"/requests/default/{rid}/").content.decode()
    m = re.search(r'<tr id="trace">.*?</tr>', body)
    return m.group(0) if m else ""


def test_the_request_page_shows_the_trace_id_linked_to_the_configured_ui(
    viewer: Client, console: Queue, settings: Any
) -> None:
    console.submit([1], request_id="traced", handler="h", traceparent=TP)
    console.submit([1], request_id="plain", handler="h")
    assert trace_row(viewer, "plain") == ""
    row = trace_row(viewer, "traced")
    assert f'<span class="mono">{TRACE}</span>' in row and "href" not in row
    settings.TRACING_UI_URL = "https://jaeger.example/trace/{trace_id}"
    assert f'href="https://jaeger.example/trace/{TRACE}"' in trace_row(viewer, "traced")


def test_the_trace_id_outlives_redis_in_the_history(viewer: Client, console: Queue) -> None:
    console.submit([1], request_id="traced", handler="h", traceparent=TP)
    finish(console)
    mirror(console)
    for key in (console.keys.request("traced"), console.keys.tasks("traced")):
        console.redis.delete(key)  # its retention over: what the page knows is the history's
    assert read.request(console, "traced") is None
    assert TRACE in trace_row(viewer, "traced")


def test_the_search_box_finds_a_request_by_its_trace_id(viewer: Client, console: Queue) -> None:
    console.submit([{"n": 1}], request_id="traced", handler="h", traceparent=TP)
    console.submit([{"n": 2}], request_id="other", handler="h")
    mirror(console)
    body = viewer.get(f"/search/?q={TRACE}").content.decode()
    assert 'data-request="traced"' in body and 'data-request="other"' not in body


def api_submit(caller: Caller, rid: str, **headers: str) -> Any:
    return caller.client.post(
        f"{API}/queues/default/requests", {"handler": "echo", "tasks": [1], "request_id": rid},
        content_type="application/json",
        headers={"Authorization": f"Bearer {caller.token}", **headers})


def test_the_api_keeps_a_traceparent_headers_context(
    console: Queue, api_operator: Caller
) -> None:
    handlers.announce(console, "w-api", ["echo"])
    assert api_submit(api_operator, "with", traceparent=TP).status_code == 201
    assert api_submit(api_operator, "bad", traceparent="00-nonsense").status_code == 201
    assert read.request(console, "with").traceparent == TP
    assert read.request(console, "bad").traceparent == ""  # ignored, as W3C says: no 400
    got = api_operator.get("/queues/default/requests/with").json()
    assert got["traceparent"] == TP


def test_with_tracing_on_the_apis_submit_is_a_send_span_under_the_header(
    console: Queue, api_operator: Caller, spans: InMemorySpanExporter
) -> None:
    handlers.announce(console, "w-api", ["echo"])
    assert api_submit(api_operator, "on", traceparent=TP).status_code == 201
    (send,) = [s for s in spans.get_finished_spans() if s.name == "send default"]
    assert send.kind == SpanKind.PRODUCER and send.parent is not None
    assert f"{send.parent.span_id:016x}" == TP[36:52]
    assert f"{send.context.trace_id:032x}" == TRACE
    assert read.request(console, "on").traceparent == tracing.traceparent_of(send.context)


def test_the_command_line_keeps_the_traceparent_environment_variable(
    console: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    handlers.announce(console, "w1", ["noop"])
    monkeypatch.setenv("TRACEPARENT", TP)
    call_command("submit", "1", handler="noop", request_id="cli", stdout=io.StringIO(),
                 stderr=io.StringIO())
    assert read.request(console, "cli").traceparent == TP

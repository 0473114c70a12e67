"""The API fuzzed from its own OpenAPI schema (schemathesis, on hypothesis): every operation,
with bodies, paths and parameters that fit the schema and with ones that do not, called over
HTTP on a live server with an admin's admin token (so every operation runs, not just its
refusal). No answer may be a 5xx. A queue with a request, dead letters and a worker gives the
generated ids something to meet."""

from __future__ import annotations

from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as run_with
from hypothesis import strategies as st
from schemathesis.generation import GenerationMode

from core.queue import Queue
from tests.api_support import token_for
from tests.console_support import fail_tasks

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
EXAMPLES = 400


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_gets_a_5xx(console: Queue, live_server: Any, mode: GenerationMode,
                             settings: Any) -> None:
    settings.API_RATE_PER_MIN = 0  # every call reaches its endpoint
    rid = console.submit([{"n": i} for i in range(3)], handler="echo", request_id="bad-1",
                         max_attempts=1).request_id
    fail_tasks(console, rid, 3)
    console.submit([{"n": 1}], handler="echo", request_id="run-1")
    console.heartbeat("w-1", {"host": "h", "pid": 1, "dead_after_ms": 60_000,
                              "queues": ["default"]})
    caller = token_for("ada", "admin", "admin")
    doc = requests.get(f"{live_server.url}/api/v1/openapi.json", timeout=10).json()
    schema = schemathesis.openapi.from_dict(doc)
    session = requests.Session()
    session.headers["Authorization"] = f"Bearer {caller.token}"
    # No keep-alive: a server thread kept serving an idle connection would keep its database
    # connection, and PostgreSQL then refuses to drop the test database at the end.
    session.headers["Connection"] = "close"
    seen: list[tuple[str, int]] = []

    @run_with(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=schema.as_strategy(mode), pick=st.booleans())
    def call(case: Any, pick: bool) -> None:
        if pick and case.path_parameters and "queue" in case.path_parameters:
            case.path_parameters["queue"] = "default"  # reach the queue that has things in it
        response = case.call(base_url=live_server.url, session=session, timeout=30)
        seen.append((case.operation.label, response.status_code))
        assert response.status_code < 500, (
            f"{case.operation.label}: {response.status_code} for {case.path_parameters} "
            f"{case.query} {case.body!r}:\n{response.text[:2000]}")

    try:
        call()
    finally:
        session.close()
    operations = {label for label, _ in seen}
    assert len(operations) >= 20, sorted(operations)  # most of the API was reached
    assert any(200 <= code < 300 for _, code in seen)

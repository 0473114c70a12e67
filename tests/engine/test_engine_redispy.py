"""The engine imports redis-py without OpenTelemetry's metrics (core/queue/redispy.py): a
process that imports the engine imports none of OpenTelemetry's modules, yet the SDK imports
as usual afterwards (for traces, or an application's own metrics), and
QA_REDIS_OTEL_METRICS=1 leaves redis-py's import as it was. Each case runs in a fresh
interpreter, as a command or a worker starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.M)
BLOCKED = {"opentelemetry.sdk.metrics", "opentelemetry.metrics"}  # tried, answered ImportError


def run(code: str, **env: str) -> tuple[str, set[str]]:
    base = {k: v for k, v in os.environ.items() if k != "QA_REDIS_OTEL_METRICS"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code],
                          env={**base, **env}, capture_output=True, text=True, timeout=60,
                          check=True)
    return done.stdout, set(IMPORTED.findall(done.stderr))


def otel(modules: set[str]) -> set[str]:
    return {m for m in modules if m == "opentelemetry" or m.startswith("opentelemetry.")}


def test_the_engine_imports_none_of_opentelemetry() -> None:
    out, modules = run("import core.queue, redis; print(redis.Redis.__name__)")

    assert out == "Redis\n"
    assert otel(modules) <= BLOCKED


def test_opentelemetry_imports_as_usual_after_the_engine() -> None:
    out, modules = run(
        "import core.queue\n"
        "from opentelemetry import metrics, trace\n"
        "from opentelemetry.sdk.metrics import MeterProvider\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "metrics.set_meter_provider(MeterProvider())\n"
        "metrics.get_meter('x').create_counter('c').add(1)\n"
        "import redis.observability.providers as p\n"
        "print(type(metrics.get_meter_provider()).__name__, p.OTEL_AVAILABLE)")

    assert out == "MeterProvider False\n"
    assert {"opentelemetry.sdk.metrics._internal", "opentelemetry.sdk.trace"} <= modules


@pytest.mark.parametrize("first", ["import redis", "import opentelemetry.metrics"])
def test_nothing_is_answered_for_redis_py_when_asked_or_when_it_came_first(first: str) -> None:
    out, _ = run(f"{first}\nimport core.queue\nimport redis.observability.providers as p\n"
                 "print(p.OTEL_AVAILABLE)")
    assert out == "True\n"

    out, modules = run("import core.queue\nimport redis.observability.providers as p\n"
                       "print(p.OTEL_AVAILABLE)", QA_REDIS_OTEL_METRICS="1")
    assert out == "True\n"
    assert "opentelemetry.sdk.metrics._internal" in modules

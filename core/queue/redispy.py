"""redis-py, imported by the engine before anything else of it (core/queue/__init__.py).

redis-py 8 imports OpenTelemetry's metrics SDK and API when they are installed (its
redis/observability: `from opentelemetry.sdk.metrics import MeterProvider`), for metrics of
its own that stay off until an application turns them on through its observability API;
queueadmin never does. The imports are 62 modules, 50-100 ms of every process's start (each
command, worker and console process), tracing on or off, and the SDK is installed wherever
queueadmin's tracing is (`[tracing]`, docs/tracing.md). So the engine imports redis-py with
those imports answered "not installed" (Python's import system raises ImportError for a
module whose `sys.modules` entry is None) and takes the entries away again: the SDK imports as
usual afterwards, for queueadmin's traces or the application's own metrics; only redis-py's
own metrics are not available in the process. QA_REDIS_OTEL_METRICS=1 leaves redis-py's
import as it is, for an application that wants them. Nothing is done when redis-py or
OpenTelemetry's metrics were imported before.
"""

from __future__ import annotations

import os
import sys

# What redis-py imports for its metrics, each in a `try` that treats ImportError as "not
# installed": the SDK's metrics and the API's.
_METRICS = ("opentelemetry.sdk.metrics", "opentelemetry.metrics")


def load() -> None:
    """Import redis-py (see the module's docstring)."""
    if ("redis" in sys.modules or any(m in sys.modules for m in _METRICS)
            or os.environ.get("QA_REDIS_OTEL_METRICS", "").strip() not in ("", "0")):
        import redis
        return
    for m in _METRICS:
        sys.modules[m] = None  # type: ignore[assignment]
    try:
        import redis  # noqa: F401
    finally:
        for m in _METRICS:
            if m in sys.modules and sys.modules[m] is None:
                del sys.modules[m]


load()

"""Whether this process traces, and with which tracer provider: set once by setup_from_env()
(every Django process at start, and run_worker()) or enable() (a program, a test, with a
provider of its own). While on, the engine's submits are traced (tracehook.SENDING)."""

from __future__ import annotations

import logging
import threading
from typing import Any

from core.queue import tracehook

from . import config, producer
from .live import STATE

log = logging.getLogger("queueadmin.tracing")

SCOPE = "queueadmin"


_LOCK = threading.Lock()


def enabled() -> bool:
    return STATE.provider is not None


def setup_from_env() -> bool:
    """Turn tracing on if the OTEL_* settings ask for it (config.configured()); nothing from
    OpenTelemetry is imported otherwise. Returns whether tracing is on."""
    if STATE.provider is not None:
        return True
    if not config.configured():
        return False
    with _LOCK:
        if STATE.provider is None:
            try:
                from opentelemetry import trace
            except ImportError:
                log.warning("the OTEL_* settings ask for tracing, but OpenTelemetry is not "
                            "installed: pip install 'queueadmin[tracing]' (tracing stays off)")
                return False
            provider = config.build_provider()
            if provider is None:
                return False
            # One provider per process: an instrumented program's own, if it set one.
            current = trace.get_tracer_provider()
            if hasattr(current, "add_span_processor"):
                _enable(current, owned=False)
            else:
                trace.set_tracer_provider(provider)
                _enable(provider, owned=True)
    return True


def enable(provider: Any = None) -> None:
    """Trace with `provider` (an SDK TracerProvider; by default the global one): for programs
    that configure OpenTelemetry themselves, and tests (an in-memory exporter)."""
    if provider is None:
        from opentelemetry import trace

        provider = trace.get_tracer_provider()
    with _LOCK:
        _enable(provider, owned=False)


def _enable(provider: Any, *, owned: bool) -> None:
    STATE.provider, STATE.owned = provider, owned
    STATE.tracer = provider.get_tracer(SCOPE)
    tracehook.SENDING = producer.sending


def disable() -> None:
    """Stop tracing (what was recorded is exported first)."""
    flush()
    tracehook.SENDING = None
    STATE.provider = STATE.tracer = None
    STATE.task_spans = []


def flush(timeout_s: float = 10.0) -> None:
    """Export what this process has recorded so far (a worker stopping, a command's end)."""
    for spans in list(STATE.task_spans):
        spans.flush()
    provider = STATE.provider
    if provider is not None and hasattr(provider, "force_flush"):
        provider.force_flush(int(timeout_s * 1000))

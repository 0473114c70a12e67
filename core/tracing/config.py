"""When tracing is on (the standard OTEL_* settings, read without importing OpenTelemetry),
and the SDK's tracer provider built from them.

On when OTEL_SDK_DISABLED is not "true" and either OTEL_TRACES_EXPORTER names an exporter
other than "none", or an OTLP endpoint is set (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
OTEL_EXPORTER_OTLP_ENDPOINT: the exporter is then "otlp"). Off otherwise: unlike the SDK's
own default ("otlp" to localhost), nothing is exported unless asked for (docs/tracing.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

log = logging.getLogger("queueadmin.tracing")

ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
PROTOCOLS = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
EXPORTERS = ("otlp", "console")  # otlp: OTLP over HTTP (protobuf), the one installed


def exporter_names(env: Mapping[str, str] | None = None) -> list[str]:
    """The span exporters the settings ask for; [] when tracing is off."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return []
    asked = [n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")
             if n.strip()]
    if asked:
        return [n for n in dict.fromkeys(asked) if n != "none"]
    return ["otlp"] if any(env.get(v, "").strip() for v in ENDPOINTS) else []


def configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether the settings turn tracing on (see the module's docstring)."""
    return bool(exporter_names(env))


def build_provider(env: Mapping[str, str] | None = None) -> Any:
    """An SDK TracerProvider for the settings: resource from OTEL_SERVICE_NAME and
    OTEL_RESOURCE_ATTRIBUTES (service.name "queueadmin" if neither names one), sampler from
    OTEL_TRACES_SAMPLER, a batch processor (OTEL_BSP_*) per exporter. None if no exporter
    asked for can be made (each one refused is logged)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    env = os.environ if env is None else env
    exporters = [e for e in (_exporter(n, env) for n in exporter_names(env)) if e is not None]
    if not exporters:
        return None
    named = env.get("OTEL_SERVICE_NAME") or "service.name=" in env.get(
        "OTEL_RESOURCE_ATTRIBUTES", "")
    provider = TracerProvider(
        resource=Resource.create({} if named else {"service.name": "queueadmin"}))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporter(name: str, env: Mapping[str, str]) -> Any:
    if name == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter()
    if name != "otlp":
        log.warning("OTEL_TRACES_EXPORTER names %r, which queueadmin does not make (it makes "
                    "%s): left out", name, ", ".join(EXPORTERS))
        return None
    protocol = next((env[v].strip() for v in PROTOCOLS if env.get(v, "").strip()),
                    "http/protobuf")
    if protocol != "http/protobuf":
        log.warning("OTLP protocol %r is not installed (queueadmin exports OTLP over HTTP, "
                    "http/protobuf): no OTLP export", protocol)
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()  # endpoint, headers, timeout from OTEL_EXPORTER_OTLP_*

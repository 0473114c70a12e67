"""OpenTelemetry tracing (issue 38), off unless the standard OTEL_* settings ask for it
(config.py has the rule; docs/tracing.md the whole story).

- A submit keeps its producer's W3C traceparent with the request, in the engine's same call:
  a "send" span's while tracing is on (core.queue.tracehook.SENDING), or one a front end was
  handed (producer.incoming()).
- A worker records a "process" span per task run (runs.py): the first delivery a child of
  the submit, a redelivery linked to it, the lease wait as an event.
- A data job's split, chunks and combine have spans of their own, tagged for Spark
  (stages.py).

Importing this package imports nothing from OpenTelemetry: that happens once tracing is on.
"""

from __future__ import annotations

from typing import Any

from .config import configured
from .live import STATE
from .producer import incoming, traceparent_of
from .state import disable, enable, enabled, flush, setup_from_env


def task_spans(worker: str) -> Any:
    """A worker's recorder of task runs (runs.TaskSpans) while tracing is on, else None."""
    if STATE.provider is None:
        return None
    from .runs import TaskSpans

    spans = TaskSpans(STATE.provider, worker)
    STATE.task_spans.append(spans)
    return spans


__all__ = ["configured", "disable", "enable", "enabled", "flush", "incoming", "setup_from_env",
           "task_spans", "traceparent_of"]

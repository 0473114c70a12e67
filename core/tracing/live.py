"""This process's tracing state: the tracer provider while tracing is on (state.py sets it)."""

from __future__ import annotations

from typing import Any


class Live:
    def __init__(self) -> None:
        self.provider: Any = None  # the SDK TracerProvider while on, else None
        self.tracer: Any = None
        self.owned = False  # built here from the settings (the SDK shuts it down at exit)
        self.task_spans: list[Any] = []  # runs.TaskSpans made while on: flushed with it


STATE = Live()

"""Handlers by name: `@handler("name")` registers a function `(payload, ctx) -> Any`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from core.queue.keys import validate_id

from .context import TaskContext

Handler = Callable[[Any, TaskContext], Any]


class Registry:
    """A name -> handler map; one per worker process (the module-level default)."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._limits: dict[str, float] = {}

    def register(self, name: str, fn: Handler, *, time_limit: float | None = None) -> Handler:
        validate_id(name, "handler name")
        existing = self._handlers.get(name)
        if existing is not None and existing is not fn:
            first = f"{existing.__module__}.{existing.__qualname__}"
            raise ValueError(
                f"handler {name!r} is registered twice: {first} and "
                f"{fn.__module__}.{fn.__qualname__}"
            )
        if time_limit is not None and not time_limit > 0:
            raise ValueError(f"handler {name!r}: time_limit must be a positive number of seconds")
        self._handlers[name] = fn
        if time_limit is not None:
            self._limits[name] = time_limit
        return fn

    def handler(
        self, name: str, *, time_limit: float | None = None
    ) -> Callable[[Handler], Handler]:
        """Decorator: register the function under `name`. `time_limit` (seconds) is a hard
        limit per run: past it the task is failed (retried or dead-lettered) and the run is
        abandoned, overriding the worker's --time-limit."""
        return lambda fn: self.register(name, fn, time_limit=time_limit)

    def get(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    def time_limit(self, name: str) -> float | None:
        """The handler's own hard time limit, if it set one."""
        return self._limits.get(name)

    def names(self) -> list[str]:
        return sorted(self._handlers)

    def load(self, modules: Iterable[str]) -> None:
        """Import modules whose import registers handlers (e.g. settings' handler modules)."""
        for module in modules:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ImportError(f"cannot import handler module {module!r}: {exc}") from exc


default_registry = Registry()
handler = default_registry.handler

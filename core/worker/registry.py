"""Handlers by name: `@handler("name")` registers a function `(payload, ctx) -> Any`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from core.queue.keys import validate_id

from .context import TaskContext

Handler = Callable[[Any, TaskContext], Any]
# A handler's readiness check: None when it can run a task now, else what it waits for (said
# once in the log and in the worker's heartbeat). `at_start` (see Registry.register) says
# whether a worker waits for it before taking its first task.
Ready = Callable[[], str | None]


class Registry:
    """A name -> handler map; one per worker process (the module-level default)."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}
        self._limits: dict[str, float] = {}
        self._ready: dict[str, tuple[Ready, Callable[[], bool]]] = {}

    def register(self, name: str, fn: Handler, *, time_limit: float | None = None,
                 ready: Ready | None = None, at_start: Callable[[], bool] | None = None,
                 ) -> Handler:
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
        if ready is not None:
            self._ready[name] = (ready, at_start or (lambda: True))
        return fn

    def handler(
        self, name: str, *, time_limit: float | None = None, ready: Ready | None = None,
        at_start: Callable[[], bool] | None = None,
    ) -> Callable[[Handler], Handler]:
        """Decorator: register the function under `name`. `time_limit` (seconds) is a hard
        limit per run: past it the task is failed (retried or dead-lettered) and the run is
        abandoned, overriding the worker's --time-limit. `ready` is the handler's readiness
        check: a worker takes no task before it passes when `at_start()` says so (default:
        always), and after the handler raised Unavailable."""
        return lambda fn: self.register(name, fn, time_limit=time_limit, ready=ready,
                                        at_start=at_start)

    def not_ready(self, names: list[str] | None = None, *, starting: bool = False
                  ) -> str | None:
        """What the handlers `names` (default: all) wait for, or None when all are ready;
        `starting`: only the checks a worker waits for before its first task."""
        for name in names if names is not None else self.names():
            check = self._ready.get(name)
            if check is None or (starting and not check[1]()):
                continue
            reason = check[0]()
            if reason is not None:
                return reason
        return None

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
            if not module or module.startswith(".") or not all(
                    part.isidentifier() for part in module.split(".")):
                # ("../x" and "" reached importlib: a TypeError's or ValueError's traceback)
                raise ImportError(f"cannot import handler module {module!r}: a module is "
                                  "named by its dotted path, such as myproject.handlers")
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ImportError(f"cannot import handler module {module!r}: {exc}") from exc


default_registry = Registry()
handler = default_registry.handler

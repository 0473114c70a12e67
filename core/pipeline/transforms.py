"""Registered transformations: `@transform("name")` on a function DataFrame -> DataFrame,
in a module listed in QA_HANDLER_MODULES (loaded by every worker and by `datajob submit`),
as task handlers are. A job names one with --transform instead of --sql."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from core.queue.keys import validate_id

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

Transform = Callable[["DataFrame"], "DataFrame"]

_TRANSFORMS: dict[str, Transform] = {}


def transform(name: str) -> Callable[[Transform], Transform]:
    """Decorator: register `fn(chunk: DataFrame) -> DataFrame` under `name`. The job's extra
    views (--view) are reachable from it as `chunk.sparkSession.table(NAME)`."""
    validate_id(name, "transform name")

    def register(fn: Transform) -> Transform:
        existing = _TRANSFORMS.get(name)
        if existing is not None and existing is not fn:
            raise ValueError(
                f"transform {name!r} is registered twice: {existing.__module__}."
                f"{existing.__qualname__} and {fn.__module__}.{fn.__qualname__}"
            )
        _TRANSFORMS[name] = fn
        return fn

    return register


def get(name: str) -> Transform | None:
    return _TRANSFORMS.get(name)


def names() -> list[str]:
    return sorted(_TRANSFORMS)


def load_modules(modules: list[str] | None = None) -> None:
    """Import the settings' handler modules (or `modules`), which register transforms."""
    from core.worker.registry import default_registry

    if modules is None:
        from django.conf import settings

        modules = list(getattr(settings, "QUEUEADMIN_HANDLER_MODULES", []))
    default_registry.load(modules)

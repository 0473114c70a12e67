"""One exception tree: every exception class the project defines descends from
core.queue.QueueadminError, through the root of its own layer (core/queue/errors.py draws the
tree). A new module or class is found by walking the packages, so none is left out."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import core
import queueadmin
from core.alerts.errors import AlertsError
from core.cli import CliError
from core.console.errors import ConsoleError
from core.ops.errors import OpsError
from core.pipeline.errors import PipelineError
from core.queue import QueueadminError, QueueError
from core.stack.lock import StackError
from core.worker.context import WorkerError

# The first matching prefix names the layer's root.
LAYERS: list[tuple[str, type[BaseException]]] = [
    ("core.queue", QueueError),
    ("core.queue.schedule", QueueError),
    ("core.worker", WorkerError),
    ("core.pipeline", PipelineError),
    ("core.ops", OpsError),
    ("core.alerts", AlertsError),
    ("core.cli", CliError),
    ("core.console", ConsoleError),
    ("core.views", ConsoleError),
    ("core.stack", StackError),
    ("core", QueueadminError),
    ("queueadmin", QueueadminError),
]


def project_exceptions() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (core, queueadmin):
        for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            if ".migrations" in info.name or info.name.endswith("__main__"):
                continue  # migrations define no exception; __main__ runs a command
            module = importlib.import_module(info.name)
            for _, obj in inspect.getmembers(module, inspect.isclass):
                if (obj.__module__ == module.__name__ and issubclass(obj, BaseException)
                        and not issubclass(obj, Warning)):
                    found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return list(found.values())


def test_the_walk_finds_the_layers_exceptions() -> None:
    names = {e.__name__ for e in project_exceptions()}
    assert {"QueueError", "Cancelled", "SpecError", "Refused", "DataDirBusy", "UserError",
            "NotJSON", "InvalidSchedule"} <= names


@pytest.mark.parametrize("exc", project_exceptions(), ids=lambda e: e.__qualname__)
def test_every_exception_of_the_project_descends_from_its_layers_root(
    exc: type[BaseException],
) -> None:
    if exc is QueueadminError:
        return
    root = next(r for prefix, r in LAYERS
                if exc.__module__ == prefix or exc.__module__.startswith(f"{prefix}."))
    assert issubclass(exc, root), f"{exc.__module__}.{exc.__qualname__} is no {root.__name__}"
    assert issubclass(exc, QueueadminError)

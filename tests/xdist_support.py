"""Who runs which test under pytest-xdist: the slow tests of a module that share a fixture made
once per module (a stack, a browser, a wheel) go to one test process as a unit; every other test
is handed out on its own, in the list's order (tests/conftest.py puts the slow ones first).

pytest-xdist's own `--dist loadgroup` does this from `xdist_group` marks by renaming the tests,
which pytest 9 no longer lets it do: each of the three processes then made its own stack for
one browser module (13-36 s each). Here the test processes write which tests share a module
fixture to the run's folder as they collect, and the controller's scheduler (a
`LoadScopeScheduling`, whose unit is a "scope") reads it before it hands anything out."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

GROUPS = "xdist-groups.json"  # in the run's folder: {test id: its module's file}


def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the whole run shares: the controller's base folder under pytest-xdist (each
    test process has a subfolder of it), this process's own otherwise."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def uses_module_fixture(item: pytest.Item) -> bool:
    """Whether the test uses (directly or through another) a fixture made once per module."""
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope == "module" for chain in defs for d in chain)


def record_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a test process: write the groups of the tests it collected (every process collects
    the same; each writes the same file, atomically) to the run's folder."""
    if not hasattr(config, "workerinput"):
        return
    groups = {item.nodeid: item.nodeid.split("::")[0] for item in items
              if item.get_closest_marker("slow") is not None and uses_module_fixture(item)}
    folder = run_dir(config._tmp_path_factory)  # type: ignore[attr-defined]
    part = folder / f"{GROUPS}.{os.getpid()}"
    part.write_text(json.dumps(groups))
    part.replace(folder / GROUPS)


class ModuleGroups(LoadScopeScheduling):  # type: ignore[misc]  # xdist has no types
    """One unit per test, but one per module for the tests in the groups file."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.groups: dict[str, str] = {}

    def schedule(self) -> None:
        if self.collection is None:  # the first call: every process has collected
            path = run_dir(self.config._tmp_path_factory) / GROUPS
            self.groups = json.loads(path.read_text()) if path.exists() else {}
        super().schedule()

    def _split_scope(self, nodeid: str) -> str:
        return self.groups.get(nodeid, nodeid)

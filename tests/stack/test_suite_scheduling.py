"""The suite's own scheduling under pytest-xdist (tests/xdist_support.py): the slow tests of a
module that share a module fixture run in one test process, so that the fixture (a stack, a
browser) is made once; other tests still spread over the processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CONFTEST = '''
import pytest
from tests.xdist_support import ModuleGroups, record_groups

def pytest_collection_modifyitems(config, items):
    record_groups(config, items)

@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return ModuleGroups(config, log)
'''
SHARED = '''
import os, time
import pytest
pytestmark = pytest.mark.slow

@pytest.fixture(scope="module")
def made_once():
    with open("made.txt", "a") as out:
        out.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("i", range(4))
def test_shared(made_once, i):
    time.sleep(0.3)
'''
OTHER = '''
import time
import pytest

@pytest.mark.parametrize("i", range(6))
def test_other(i):
    time.sleep(0.3)
'''


@pytest.mark.slow  # two pytest-xdist processes: ~5 s
def test_a_modules_shared_fixture_is_made_once_and_the_rest_spread(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_shared.py").write_text(SHARED)
    (tmp_path / "test_other.py").write_text(OTHER)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers = slow: slow\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-v", "-p", "no:randomly",
         "-p", "no:cacheprovider", "-p", "no:django", "--no-loadscope-reorder",
         "--basetemp", str(tmp_path / "base")],
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "made.txt").read_text().count("\n") == 1  # made once, in one process
    ran_on: dict[str, set[str]] = {"test_shared": set(), "test_other": set()}
    for line in done.stdout.splitlines():
        if "PASSED" in line and line.startswith("[gw"):
            worker = line.split("]", 1)[0].strip("[")
            ran_on[line.split("::")[1].split("[")[0]].add(worker)
    assert len(ran_on["test_shared"]) == 1
    assert ran_on["test_other"] == {"gw0", "gw1"}

"""The project's own tests: the embedded stack (core/stack), settings, the wheel, migrations,
the exception tree, the README's example and the docs' links.

Here: start_stack, for the tests of `manage.py runstack`; their helpers that are not fixtures
are in tests/stack_support.py."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.procs import free_port, pid_alive
from tests.stack_support import ROOT, Running, StartStack, seed_sample


@pytest.fixture
def start_stack(tmp_path: Path) -> Iterator[StartStack]:
    """start_stack(*args, argv=None, **env) -> Running: a `manage.py runstack` of the test's
    (no Spark unless `env` asks), its var/ holding the sample data as an earlier start left it
    (seed_sample); whatever is still running at the end is killed, children included."""
    started: list[Running] = []

    def start(*args: str, argv: list[str] | None = None, **env: str) -> Running:
        """`manage.py runstack *args`, or `argv` (which runs it), with `env` on top of the
        test's environment; every stack of one test shares one QA_VAR_DIR."""
        port = free_port()
        base = {
            k: v for k, v in os.environ.items()
            if k not in ("REDIS_URL", "DATABASE_URL", "QA_ADMIN_PASSWORD", "SECRET_KEY",
                         "QA_REDIS_FSYNC", "QUEUE_PREFIX", "SPARK_REMOTE", "SPARK_MASTER")
        }
        var_dir = tmp_path / "var"
        if not var_dir.exists():
            var_dir.mkdir()
            seed_sample(var_dir)
        process = subprocess.Popen(
            argv or [sys.executable, "manage.py", "runstack", *args],
            cwd=ROOT, env={**base, "PORT": str(port), "HOST": "127.0.0.1",
                           "QA_VAR_DIR": str(var_dir), "PYTHONUNBUFFERED": "1",
                           # no Spark unless a test asks for it (a JVM start per stack)
                           "QA_SPARK": "off", **env},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,  # signals for the test runner must not reach it
        )
        running = Running(process, port, var_dir)

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                running.lines.append(line)

        threading.Thread(target=read, daemon=True).start()
        started.append(running)
        return running

    yield start
    for running in started:  # a failed test must not leave a stack behind
        if running.process.poll() is None:
            os.killpg(running.process.pid, signal.SIGKILL)
            running.process.wait()
        # Its children run in sessions of their own: killpg does not reach them.
        for pid in re.findall(r"\(pid (\d+)\)", "".join(running.lines)):
            if pid_alive(int(pid)):
                os.kill(int(pid), signal.SIGKILL)

"""What the browser tests (tests/console/test_browser*.py) share besides their fixtures
(tests/console/conftest.py): the check that a browser is there, a `manage.py runstack` of
their own on free ports, the stack's commands, logging in through the form, and waiting."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from core.procs import free_port, pid_alive
from core.queue import Queue
from tests.stack_support import seed_database, seed_sample

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "browser-test-password"  # the stack's admin's (QA_ADMIN_PASSWORD)
SCREENSHOTS = ROOT / "var" / "screenshots"


def require_browser() -> None:
    """Skip the calling test module where Playwright or Debian's Chromium is missing (`make
    test` installs both: system-deps, the dev extra); called at its import."""
    pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)",
                    allow_module_level=True)


@dataclass
class Stack:
    process: subprocess.Popen[str]
    port: int
    redis_port: int
    env: dict[str, str] = field(default_factory=dict)  # what its processes run with
    lines: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    def pids(self) -> list[int]:
        return [int(p) for p in re.findall(r"\(pid (\d+)\)", "".join(self.lines))]


@contextlib.contextmanager
def running_stack(var_dir: Path, extra_env: dict[str, str] | None = None, *,
                  spark_remote: str | None = None) -> Iterator[Stack]:
    """`runstack --workers 1` in `var_dir`, on free ports, with `extra_env` (e.g. the
    handler modules its workers import), until the block ends. No Spark (QA_SPARK=off) unless
    `spark_remote` names a Spark Connect server for its data jobs (the run's, `connect_url`):
    a stack's own Spark is a JVM started and warmed by a first job, tens of seconds of both
    cores that a test of the console's other pages does not use. Its QA_VAR_DIR starts with
    the sample data and a migrated database, as an earlier start leaves them (seed_sample,
    seed_database)."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("REDIS_URL", "DATABASE_URL", "SECRET_KEY", "QUEUE_PREFIX", "SPARK_REMOTE",
                     "SPARK_MASTER", "QA_SPARK")
    }
    port, redis_port = free_port(), free_port()
    spark = {"SPARK_REMOTE": spark_remote} if spark_remote else {"QA_SPARK": "off"}
    env |= {
        "PORT": str(port), "HOST": "127.0.0.1", "QA_VAR_DIR": str(var_dir),
        "QA_REDIS_PORT": str(redis_port), "QA_ADMIN_PASSWORD": PASSWORD,
        "PYTHONUNBUFFERED": "1", **spark,
        # Pages refresh their live part every second, not every 3: a test that waits for a
        # change to show waits a third as long.
        "QA_CONSOLE_POLL_S": "1", **(extra_env or {}),
    }
    seed_sample(var_dir)  # as an earlier start left them: the stack starts seconds sooner
    seed_database(var_dir)
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runstack", "--workers", "1"], cwd=ROOT, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    running = Stack(process, port, redis_port, env)

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            running.lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    try:
        deadline = time.monotonic() + 90
        while not any("queueadmin is up" in line for line in running.lines):
            assert process.poll() is None, "".join(running.lines)
            assert time.monotonic() < deadline, "".join(running.lines)
            time.sleep(0.1)
        yield running
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
        for pid in running.pids():  # children run in sessions of their own
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)


def manage(stack: Stack, *args: str) -> str:
    """`manage.py *args` in the stack's environment; what it printed."""
    done = subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=stack.env,
                          capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def log_in(pg: Any, name: str, password: str) -> None:
    """Fill and send the login form `pg` shows; wait for the page it leads to."""
    pg.fill("input[name=username]", name)
    pg.fill("input[name=password]", password)
    pg.click("button[type=submit]")
    pg.wait_for_url(re.compile(r".*/(\?.*)?$"))


def logged_in_pages(browser: Any, stack: Stack, accounts: dict[str, str],
                    expected: Callable[[Any], bool] = lambda message: False
                    ) -> Iterator[Callable[[str], Any]]:
    """Yields login(name) -> a page logged in through the login form; no script error, CSP
    refusal or failed load allowed on any page it opens, but the console errors `expected`
    says a test asked for."""
    contexts: list[Any] = []
    errors: list[str] = []

    def logged(m: Any) -> None:
        if m.type == "error" and not expected(m):
            errors.append(m.text)

    def open_as(name: str) -> Any:
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        contexts.append(context)
        pg = context.new_page()
        pg.on("pageerror", lambda exc: errors.append(str(exc)))
        pg.on("console", logged)
        pg.goto(stack.url("/login/"))
        log_in(pg, name, accounts[name])
        return pg

    yield open_as
    for context in contexts:
        context.close()
    assert errors == [], errors


def queue(stack: Stack, name: str = "default") -> Queue:
    return Queue(redis.Redis.from_url(stack.redis_url, decode_responses=True), name)


def until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.1)
    return value

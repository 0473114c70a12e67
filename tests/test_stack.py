"""`manage.py runstack` (make run) as a user runs it: a real process tree, real HTTP, and
Ctrl-C / SIGTERM leaving nothing behind."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from core.redis_server import RedisServer, free_port, pid_alive

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


@dataclass
class Running:
    process: subprocess.Popen[str]
    port: int
    var_dir: Path
    lines: list[str] = field(default_factory=list)

    def wait_for_line(self, pattern: str, timeout: float = 60) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                m = re.search(pattern, line)
                if m:
                    return m
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(self.lines)}")

    def pid_of(self, name: str) -> int:
        return int(self.wait_for_line(rf"^{name} \(pid (\d+)\)").group(1))

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


StartStack = Callable[..., Running]


@pytest.fixture
def start_stack(tmp_path: Path) -> Iterator[StartStack]:
    started: list[Running] = []

    def start(**env: str) -> Running:
        port = free_port()
        base = {
            k: v for k, v in os.environ.items()
            if k not in ("REDIS_URL", "DATABASE_URL", "QA_ADMIN_PASSWORD", "SECRET_KEY")
        }
        var_dir = tmp_path / "var"
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runstack"],
            cwd=ROOT, env={**base, "PORT": str(port), "HOST": "127.0.0.1",
                           "QA_VAR_DIR": str(var_dir), "PYTHONUNBUFFERED": "1", **env},
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


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )


def _get(opener: urllib.request.OpenerDirector, url: str) -> tuple[int, str]:
    with opener.open(url, timeout=10) as response:
        return response.status, response.read().decode()


def _log_in(stack: Running, password: str) -> urllib.request.OpenerDirector:
    opener = _opener()
    _, page = _get(opener, stack.url("/admin/login/?next=/"))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token
    form = urllib.parse.urlencode({
        "csrfmiddlewaretoken": token.group(1), "username": "admin", "password": password,
        "next": "/",
    }).encode()
    opener.open(urllib.request.Request(stack.url("/admin/login/?next=/"), data=form), timeout=10)
    return opener


def _gone(pid: int, timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_serves_the_console_and_sigint_stops_everything(
    start_stack: StartStack, redis_server: RedisServer
) -> None:
    stack = start_stack(REDIS_URL=redis_server.url, QUEUE_PREFIX="stacktest")
    stack.wait_for_line(r"queueadmin is up")
    gunicorn = stack.pid_of("gunicorn")
    password = stack.wait_for_line(r"created user admin with password (\S+)").group(1)
    assert (stack.var_dir / "admin_password").read_text().strip() == password
    assert "redis-server (pid" not in "".join(stack.lines)  # REDIS_URL given: none started

    assert _get(_opener(), stack.url("/admin/login/"))[0] == 200
    assert _get(_opener(), stack.url("/static/core/console.css"))[0] == 200  # whitenoise
    status, home = _get(_log_in(stack, password), stack.url("/"))
    assert status == 200 and "Queue default" in home

    stack.process.send_signal(signal.SIGINT)

    assert stack.process.wait(30) == 0
    assert _gone(gunicorn)
    assert "stopped on SIGINT" in "".join(stack.lines)


def test_embedded_redis_is_started_and_sigterm_stops_it(start_stack: StartStack) -> None:
    stack = start_stack(QA_REDIS_PORT=str(free_port()), QA_ADMIN_PASSWORD="s3cret-pass")
    stack.wait_for_line(r"queueadmin is up")
    redis_pid, gunicorn = stack.pid_of("redis-server"), stack.pid_of("gunicorn")
    assert (stack.var_dir / "redis" / "appendonlydir").is_dir()  # appendonly yes, under var/
    assert not (stack.var_dir / "admin_password").exists()  # the password came from the env
    assert _get(_log_in(stack, "s3cret-pass"), stack.url("/"))[0] == 200

    stack.process.send_signal(signal.SIGTERM)

    assert stack.process.wait(30) == 0
    assert _gone(gunicorn) and _gone(redis_pid)


def test_a_child_that_dies_stops_the_rest_and_fails(start_stack: StartStack) -> None:
    stack = start_stack(QA_REDIS_PORT=str(free_port()))
    stack.wait_for_line(r"queueadmin is up")
    redis_pid, gunicorn = stack.pid_of("redis-server"), stack.pid_of("gunicorn")

    os.kill(gunicorn, signal.SIGKILL)

    assert stack.process.wait(30) == 1
    assert _gone(redis_pid)
    stack.wait_for_line(r"gunicorn \(pid \d+\) exited with code -9")

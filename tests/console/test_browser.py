"""The console in a real browser (Playwright driving Debian's Chromium) against the stack
`make run` serves (`manage.py runstack`: gunicorn, the mirror, a worker): log in, watch a
request's progress bar reach done without reloading, open a dead-letter group, see a worker
go stale after a SIGKILL.

`pytest tests/console/test_browser.py --screenshots` also saves each page under var/screenshots/.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from core.queue import Queue
from core.stack.redis_server import free_port, pid_alive

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "browser-test-password"
SCREENSHOTS = ROOT / "var" / "screenshots"

playwright_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():  # `make test` installs it (system-deps); a bare venv may not
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)


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
def running_stack(var_dir: Path, extra_env: dict[str, str] | None = None) -> Iterator[Stack]:
    """`runstack --workers 1` in `var_dir`, on free ports, with `extra_env` (e.g. the
    handler modules its workers import), until the block ends."""
    env = {
        k: v for k, v in os.environ.items()
        if k not in ("REDIS_URL", "DATABASE_URL", "SECRET_KEY", "QUEUE_PREFIX")
    }
    port, redis_port = free_port(), free_port()
    env |= {
        "PORT": str(port), "HOST": "127.0.0.1", "QA_VAR_DIR": str(var_dir),
        "QA_REDIS_PORT": str(redis_port), "QA_ADMIN_PASSWORD": PASSWORD,
        "PYTHONUNBUFFERED": "1", **(extra_env or {}),
    }
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


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """One `runstack --workers 1` for the module, in a directory of its own, on free ports."""
    with running_stack(tmp_path_factory.mktemp("browser-var")) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any, stack: Stack) -> Iterator[Any]:
    """A logged-in page, through the login form as a user would."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    pg.goto(stack.url("/"))
    assert "/login/" in pg.url
    pg.fill("input[name=username]", "admin")
    pg.fill("input[name=password]", PASSWORD)
    pg.click("button[type=submit]")
    pg.wait_for_url(re.compile(r".*/(\?.*)?$"))
    yield pg
    context.close()
    # No script error and no CSP refusal on any page the test opened.
    assert errors == []


@pytest.fixture
def shots(request: pytest.FixtureRequest) -> Any:
    wanted = request.config.getoption("--screenshots")

    def shot(pg: Any, name: str) -> None:
        if wanted:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            pg.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)

    return shot


def queue(stack: Stack) -> Queue:
    return Queue(redis.Redis.from_url(stack.redis_url, decode_responses=True), "default")


def test_a_running_requests_progress_bar_reaches_done_without_a_reload(
    stack: Stack, page: Any, shots: Any
) -> None:
    q = queue(stack)
    rid = q.submit([{"seconds": 0.6}] * 6, handler="sleep", concurrency=1).request_id
    page.goto(stack.url(f"/requests/default/{rid}/"))
    page.evaluate("window.__notReloaded = true")
    state = page.locator("h1 .state")
    assert state.inner_text() in ("active", "open")
    done_cell = page.locator("table.kv tr", has_text="Done").locator("td")
    first_done = int(done_cell.inner_text())
    assert first_done < 6
    shots(page, "request-running")
    page.wait_for_selector("h1 .state.s-done", timeout=30_000)
    assert int(page.locator("table.kv tr", has_text="Done").locator("td").inner_text()) == 6
    assert page.evaluate("window.__notReloaded") is True  # htmx swapped, nothing reloaded
    shots(page, "request-done")
    # The requests list shows it done too, with a full progress bar.
    page.goto(stack.url(f"/requests/?queue=default&id={rid}"))
    assert rid in page.content()
    shots(page, "requests")
    page.goto(stack.url("/?queue=default"))
    page.wait_for_selector("svg", timeout=10_000)  # the charts
    shots(page, "overview")


def test_a_dead_letter_group_opens_to_its_letters(stack: Stack, page: Any, shots: Any) -> None:
    q = queue(stack)
    rid = q.submit(
        [{"message": f"bad row {i}"} for i in range(5)], handler="fail", max_attempts=1
    ).request_id
    assert q.wait(rid, timeout=30) == "failed"
    page.goto(stack.url("/dead/?queue=default"))
    # The mirror copies dead letters into the database; the page is live.
    group = page.locator("a[href*='/dead/default/']").first
    group.wait_for(timeout=30_000)
    shots(page, "dead-letter-groups")
    group.click()
    page.wait_for_url(re.compile(r".*/dead/default/[0-9a-f]+/.*"))
    page.wait_for_selector(f"text={rid}", timeout=10_000)
    assert page.locator("text=bad row").count() >= 1
    shots(page, "dead-letter-group")


def test_a_worker_killed_with_sigkill_turns_stale_on_the_workers_page(
    stack: Stack, page: Any, shots: Any
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "QUEUE_PREFIX"}
    env |= {"REDIS_URL": stack.redis_url, "DJANGO_SETTINGS_MODULE": "queueadmin.settings"}
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "--queue", "default", "--dead-after", "4"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        page.goto(stack.url("/workers/?queue=default"))
        row = page.locator("tr[data-worker]", has=page.locator(f"td.n:text-is('{worker.pid}')"))
        deadline = time.monotonic() + 30
        while row.count() == 0:  # the page polls; the worker registers at its first beat
            assert time.monotonic() < deadline, page.content()
            page.wait_for_timeout(500)
        assert row.locator(".wstate").inner_text() == "alive"
        page.evaluate("window.__notReloaded = true")
        shots(page, "workers")
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its heartbeat process
        row.locator(".wstate.w-stale, .wstate.w-gone").wait_for(timeout=30_000)
        assert page.evaluate("window.__notReloaded") is True
        shots(page, "workers-stale")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


def test_the_pending_entries_page_shows_a_leased_task(
    stack: Stack, page: Any, shots: Any
) -> None:
    q = queue(stack)
    rid = q.submit([{"seconds": 8}], handler="sleep").request_id
    page.goto(stack.url("/pending/?queue=default"))
    page.wait_for_selector(f"text={rid}", timeout=20_000)
    shots(page, "pending")
    assert q.wait(rid, timeout=30) == "done"

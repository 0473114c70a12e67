"""The package as someone who installs it gets it: `python -m build` of the checkout (the sdist,
then the wheel built from it, as the dev extras install it), installed in a fresh virtualenv
outside it, runs the stack (`queueadmin runstack`) from a directory of its own,
with its state in that directory's var/, and serves the console with its CSS and JavaScript to
a real browser.

The new virtualenv gets the project only from the wheel; the dependencies come from this
interpreter's site-packages through a .pth file (a .pth line adds a path, it does not run the
.pth files there, so an editable install of a checkout stays out), which keeps the test off the
network and under a minute.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from core.procs import free_port, pid_alive
from tests.browser_support import log_in

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "packaging-test-password"
# What of the checkout is not the source: a wheel built from a copy without them is built
# from what git would hold (a stale build/ directory would otherwise leak into it).
NOT_SOURCE = (".git", ".venv", "var", "build", "dist", "*.egg-info", "__pycache__",
              ".mypy_cache", ".ruff_cache", ".pytest_cache", ".hypothesis", "node_modules")

playwright_api = pytest.importorskip("playwright.sync_api")
if not Path(CHROMIUM).exists():
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)", allow_module_level=True)


@dataclass
class Installed:
    venv: Path
    site_packages: Path
    env: dict[str, str]  # a user's environment: nothing of the checkout's or the test run's

    def bin(self, name: str) -> str:
        return str(self.venv / "bin" / name)


@dataclass
class Running:
    process: subprocess.Popen[str]
    port: int
    lines: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def text(self) -> str:
        return "".join(self.lines)

    def pids(self) -> list[int]:
        return [int(p) for p in re.findall(r"\(pid (\d+)\)", self.text())]


def _run(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, **kwargs)
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done


def _files(root: Path) -> set[str]:
    """Every file under `root` but compiled bytecode (Python may write that anywhere)."""
    return {str(p.relative_to(root)) for p in root.rglob("*")
            if "__pycache__" not in p.parts and not p.is_dir()}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Installed:
    """The wheel built from a copy of the checkout and installed in a virtualenv of its own,
    once a run: the test processes of one run share it (a build is tens of seconds of CPU; the
    two tests here may run in two processes at once), the second waiting for the first."""
    # A user's environment: nothing of the checkout's or of the test run's.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("QA_", "SPARK_", "DJANGO_", "PYTEST_"))
           and k not in ("PYTHONPATH", "VIRTUAL_ENV", "REDIS_URL", "DATABASE_URL", "SECRET_KEY",
                         "QUEUE_PREFIX", "METRICS_TOKEN", "HOST", "PORT")}
    run = tmp_path_factory.getbasetemp()
    base = (run if worker_id == "master" else run.parent) / "packaging"
    base.mkdir(exist_ok=True)
    with open(base / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (base / "venv" / "installed").exists():
            _build_and_install(base, env)
            (base / "venv" / "installed").touch()
    venv = base / "venv"
    found = _run([str(venv / "bin" / "python"), "-c", "import sysconfig; "
                  "print(sysconfig.get_paths()['purelib'])"], env=env).stdout.strip()
    return Installed(venv, Path(found), env)


def _build_and_install(base: Path, env: dict[str, str]) -> None:
    source = base / "source"
    shutil.rmtree(source, ignore_errors=True)  # what is left of one cut short
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE), symlinks=True)
    # What a release runs: an isolated build (setuptools from the package index pip is set up
    # with) of the sdist, then of the wheel from the sdist, into dist/, which git ignores.
    built = _run([sys.executable, "-m", "build", "--outdir", str(source / "dist")], cwd=source,
                 env=env)
    assert "warning" not in built.stdout.replace("byte-compiling is disabled", "").lower(), (
        built.stdout)
    [wheel] = (source / "dist").glob("queueadmin-*.whl")
    [sdist] = (source / "dist").glob("queueadmin-*.tar.gz")
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--no-index",
                              f"dist/{wheel.name}", f"dist/{sdist.name}"],
                             capture_output=True, text=True, timeout=30)
    assert len(ignored.stdout.splitlines()) == 2, f"dist/ is not in .gitignore: {ignored}"

    venv = base / "venv"
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env=env)
    _run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
          "--quiet", "--no-deps", "--no-index", str(wheel)], env=env)
    found = _run([str(venv / "bin" / "python"), "-c", "import sysconfig; "
                  "print(sysconfig.get_paths()['purelib'])"], env=env).stdout.strip()
    site_packages = Path(found)
    assert site_packages.is_relative_to(venv)
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site_packages / "zz_queueadmin_test_deps.pth").write_text("\n".join(sorted(deps)) + "\n")


def test_the_wheel_carries_what_the_product_needs(installed: Installed, tmp_path: Path) -> None:
    # The project comes from the wheel, not from the checkout.
    probe = ("import core, queueadmin, core.pipeline.jvm as jvm, core.sample as sample; "
             "print(core.__file__); print(queueadmin.__file__); print(jvm.SOURCE_DIR); "
             "print(sample.__file__)")
    paths = _run([installed.bin("python"), "-c", probe], cwd=tmp_path,
                 env=installed.env).stdout.split()
    assert all(Path(p).is_relative_to(installed.site_packages) for p in paths), paths
    package = installed.site_packages
    for needed in ("queueadmin/templates/base.html", "queueadmin/templates/core/overview.html",
                   "queueadmin/static/core/console.css", "queueadmin/static/core/console.js",
                   "queueadmin/static/core/favicon.ico",
                   "core/queue/lua/dequeue.lua", "core/queue/lua/_base.lua",
                   "core/queue/schedule/lua/claim.lua", "core/pipeline/log4j2.properties",
                   "core/pipeline/spark_functions.txt",
                   "core/pipeline/jvm/src/org/queueadmin/spark/Slices.java"):
        assert (package / needed).is_file(), needed
    assert not (package / "templates").exists() and not (package / "static").exists()
    # The command lists the project's management commands, with its settings.
    listing = _run([installed.bin("queueadmin"), "help"], cwd=tmp_path, env=installed.env).stdout
    for command in ("runstack", "runworker", "datajob", "submit", "migrate", "sampledata"):
        assert re.search(rf"^\s+{command}$", listing, re.M), listing
    assert "queueadmin help <subcommand>" in listing
    assert not (tmp_path / "var").exists()  # nothing signed, nothing kept: no var/ made
    # Run from inside site-packages, the default var/ would be there: refused in one line,
    # nothing written.
    refused = subprocess.run([installed.bin("queueadmin"), "check"], cwd=package,
                             env=installed.env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "set QA_VAR_DIR" in refused.stderr, refused.stderr
    assert len(refused.stderr.splitlines()) == 1, refused.stderr
    assert not (package / "var").exists()


def test_runstack_from_the_wheel_serves_the_console_with_its_assets(
    installed: Installed, tmp_path: Path
) -> None:
    before = _files(installed.site_packages)
    port, redis_port = free_port(), free_port()
    env = installed.env | {
        "PORT": str(port), "HOST": "127.0.0.1", "QA_REDIS_PORT": str(redis_port),
        "QA_ADMIN_PASSWORD": PASSWORD, "QA_SPARK": "off", "PYTHONUNBUFFERED": "1",
    }
    home = tmp_path / "site"
    home.mkdir()
    process = subprocess.Popen(
        [installed.bin("queueadmin"), "runstack", "--workers", "1"], cwd=home, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    stack = Running(process, port)

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            stack.lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 90
        while "queueadmin is up" not in stack.text():
            assert process.poll() is None, stack.text()
            assert time.monotonic() < deadline, stack.text()
            time.sleep(0.1)

        # The stack's state is the working directory's var/.
        var = home / "var"
        for made in ("db.sqlite3", "secret_key", "stack.lock", "redis", "static/core/console.css",
                     "sample"):
            assert (var / made).exists(), made
        # Its workers (run as `python -m queueadmin`) run tasks: the installed command submits
        # one and waits for it.
        # (--any-handler: "up" is the console's answer; a worker may announce its handlers a
        # moment later on a busy machine.)
        done = _run([installed.bin("queueadmin"), "submit", "{}", "--handler", "noop",
                     "--any-handler", "--wait", "--timeout", "30"], cwd=home, env=env)
        assert "done" in done.stdout + done.stderr

        # Served from the wheel's assets, before any login.
        with urllib.request.urlopen(stack.url("/favicon.ico"), timeout=10) as response:
            assert response.headers["Content-Type"] == "image/x-icon"
            assert response.read(4) == b"\x00\x00\x01\x00"

        _check_in_browser(stack)

        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0, stack.text()
        reader.join(10)  # its last lines: the reader can be behind the exit (seen in a run)
        assert "stopped on SIGINT" in stack.text()
        deadline = time.monotonic() + 10
        while any(pid_alive(p) for p in stack.pids()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in stack.pids() if pid_alive(p)], stack.text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        for pid in stack.pids():  # children run in sessions of their own
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)

    # Nothing of the stack's was written into the installed package.
    assert _files(installed.site_packages) == before
    assert not (installed.site_packages / "var").exists()


def _check_in_browser(stack: Running) -> None:
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            page = browser.new_context().new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            assets: dict[str, tuple[int, int]] = {}

            def seen(response: Any) -> None:
                name = response.url.rsplit("/", 1)[-1]
                if "/static/" in response.url:
                    assets[name] = (response.status, len(response.body()))

            page.on("response", seen)
            page.goto(stack.url("/"))
            assert "/login/" in page.url
            log_in(page, "admin", PASSWORD)
            page.wait_for_load_state("load")
            assert "Queue default" in page.content()

            for asset in ("console.css", "console.js", "htmx-2.min.js"):
                status, size = assets.get(asset, (0, 0))
                assert status == 200 and size > 0, (asset, assets)
            # The stylesheet is applied: the header takes its brand colour (--brand: #1f3350).
            colour = page.evaluate(
                "getComputedStyle(document.querySelector('header.top')).backgroundColor")
            assert colour == "rgb(31, 51, 80)"
            # htmx runs, and so does console.js: a Live toggle switched off in this browser
            # (kept in localStorage) comes up off on the next page, though the HTML says on.
            assert page.evaluate("typeof window.htmx") == "object"
            page.evaluate("localStorage.setItem('queueadmin-live', 'off')")
            page.goto(stack.url("/dead/?queue=default"))
            toggle = page.locator("input[data-live-toggle]")
            assert toggle.get_attribute("checked") is not None
            assert toggle.is_checked() is False
            assert errors == []
        finally:
            browser.close()

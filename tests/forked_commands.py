"""Commands run as processes of their own, without paying Python's and Django's start for each.

A test that runs forty commands from a shell (exit status, one line on stderr, what a command
imports) spent ~0.45 s a command, almost all of it the interpreter's start and Django's
imports and setup, the same for every one. `Forker` starts one server process (this module,
`python -m tests.forked_commands`) in the commands' environment; the server imports Django and
sets it up once, then for each command forks: the child is a process of its own, with its own
standard input (/dev/null), output and error (files the test reads), and it runs the command
through the entry point a shell runs (queueadmin.main.run, as manage.py does), its exit status
the process's. What is not the same as a cold start: Django is set up before the command is
parsed (which every command does first anyway, --help included), and atexit handlers do not run
(the child's output is flushed by hand). What a cold start costs is tests/ops/test_cli_startup.py's
business, where it is measured from real starts.

Requests and answers are JSON lines on the server's standard input and output."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_S = 120  # a command's, as the tests' subprocess.run gave it


@dataclass(frozen=True)
class Done:
    """What a forked command left: as subprocess.CompletedProcess, and the modules it had."""

    returncode: int
    stdout: str
    stderr: str
    modules: frozenset[str]


class Forker:
    """A server of forked commands in `env` (the whole environment, as subprocess.run's)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="forked-"))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.forked_commands"], cwd=ROOT, env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.count = 0

    def run(self, *args: str) -> Done:
        """`manage.py ARGS` in a child of the server; its exit status, output and modules."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.count += 1
        out, err, mods = (self.folder / f"{self.count}.{n}" for n in ("out", "err", "mods"))
        request = {"argv": ["manage.py", *args], "out": str(out), "err": str(err),
                   "modules": str(mods)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise RuntimeError(f"the command server exited with {self.process.wait()}")
        status = json.loads(answer)["status"]
        modules = frozenset(mods.read_text().split()) if mods.exists() else frozenset()
        return Done(status, out.read_text(), err.read_text(), modules)

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _child(request: dict[str, Any]) -> int:
    """In the forked child: the command, as a process run from a shell would run it."""
    import traceback

    from queueadmin.main import run

    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["out"]), (2, request["err"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own, left open
    sys.argv = list(request["argv"])
    status = 0
    try:
        run()
    except SystemExit as e:  # as the interpreter turns it into an exit status
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException:  # what the interpreter would print, and 1
        traceback.print_exc()
        status = 1
    Path(request["modules"]).write_text("\n".join(sorted(sys.modules)))
    sys.stdout.flush()
    sys.stderr.flush()
    return status


def serve() -> None:
    """The server: Django set up once, then a forked child per request line."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")
    import django

    django.setup()
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(request)
            finally:
                os._exit(code)
        print(json.dumps({"status": _wait(pid, TIMEOUT_S)}), flush=True)


def _wait(pid: int, timeout: float) -> int:
    """The child's exit status; killed (-9) if it has not ended within `timeout` seconds, as
    subprocess.run's timeout would, but answered rather than raised: the test then fails on
    the status, with what the command wrote."""
    deadline = time.monotonic() + timeout
    while True:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(wait_status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        time.sleep(0.002)


if __name__ == "__main__":
    serve()

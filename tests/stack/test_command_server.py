"""The stack's command server (core/stack/commands.py, queueadmin/handoff.py): an operator's
command typed where the stack runs, with the same settings, is run by a fork of the
supervisor, and nothing else about it changes: output, exit status, standard input, Ctrl-C.
Anything that would make it run differently (other settings, code changed since the stack
started, other interpreter options) and the command runs in its own process, as before; and
no command ever runs twice."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.procs import pid_alive
from core.queue import Queue, read
from queueadmin import handoff
from tests.browser_support import Stack, queue, running_stack
from tests.stack_support import ROOT, until

pytestmark = pytest.mark.slow

SERVED = re.compile(r"^queueadmin: run by the stack \(pid (\d+)\)$", re.M)
HERE = re.compile(r"^queueadmin: runs in this process: (.*)$", re.M)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with running_stack(tmp_path_factory.mktemp("commands") / "var") as running:
        until_served = time.monotonic() + 30
        while not (Path(running.env["QA_VAR_DIR"]) / "run" / "commands.sock").exists():
            assert time.monotonic() < until_served, "".join(running.lines)
            time.sleep(0.05)
        yield running


def _run(stack: Stack, *args: str, input: str | None = None, python: tuple[str, ...] = (),
         **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *python, "manage.py", *args], cwd=ROOT, input=input,
        env={**stack.env, "QA_COMMAND_SERVER": "verbose", **env},
        capture_output=True, text=True, timeout=60)


def _labels(table: str) -> list[str]:
    return [re.sub(r"\d", "9", line) for line in table.splitlines()]


def _requests(q: Queue) -> set[str]:
    from core.queue.models import STATES

    return {r.id for state in STATES
            for r in read.requests(q, state, limit=500).items}


def test_a_command_run_by_the_stack_prints_and_exits_as_in_its_own_process(
        stack: Stack) -> None:
    served = _run(stack, "queuestat")
    own = _run(stack, "queuestat", QA_COMMAND_SERVER="off")
    assert SERVED.search(served.stderr), served.stderr
    assert served.returncode == own.returncode == 0
    # The same table (its figures are live: a worker's heartbeat may change one meanwhile).
    assert _labels(served.stdout) == _labels(own.stdout) and "default" in served.stdout

    # Bad input: the same message and exit status 2.
    bad = ["submit", "--queue", "no/such", "{}"]
    served, own = _run(stack, *bad), _run(stack, *bad, QA_COMMAND_SERVER="off")
    assert SERVED.search(served.stderr)
    assert served.returncode == own.returncode == 2
    assert "invalid queue name 'no/such'" in served.stderr
    assert served.stderr.splitlines()[-1] == own.stderr.splitlines()[-1]

    # An exception that leaves the command (--traceback re-raises its error): the traceback
    # and status 1, as Python ends on one.
    bad.append("--traceback")
    served, own = _run(stack, *bad), _run(stack, *bad, QA_COMMAND_SERVER="off")
    assert SERVED.search(served.stderr)
    assert served.returncode == own.returncode == 1
    assert "Traceback (most recent call last)" in served.stderr
    assert served.stderr.splitlines()[-1] == own.stderr.splitlines()[-1]

    # Its standard input is the client's: two tasks from stdin, one request in Redis.
    q = queue(stack, "from-stdin")
    served = _run(stack, "submit", "--queue", "from-stdin", "--any-handler", "--handler", "echo",
                  "--file", "-", input='{"x": 1}\n{"x": 2}\n')
    assert SERVED.search(served.stderr) and served.returncode == 0, served.stderr
    request_id = served.stdout.strip()
    info = read.request(q, request_id)
    assert info is not None and info.total == 2

    # The fork is gone once the command is done: reaped by the supervisor.
    pid = int(SERVED.findall(served.stderr)[0])
    until(lambda: not pid_alive(pid), timeout=10)


def test_other_settings_changed_code_or_other_options_run_in_the_clients_process(
        stack: Stack) -> None:
    other = _run(stack, "queuestat", QA_DATA_ROOTS="/tmp")
    assert HERE.findall(other.stderr) == ["other settings"] and other.returncode == 0
    # But the admin's password, which only the stack's start reads: served.
    assert SERVED.search(_run(stack, "queuestat", QA_ADMIN_PASSWORD="another").stderr)
    options = _run(stack, "queuestat", python=("-W", "error::UserWarning"))
    assert HERE.findall(options.stderr) == [
        "another interpreter, import path or interpreter options"]
    traced = _run(stack, "queuestat", OTEL_TRACES_EXPORTER="console")
    assert HERE.findall(traced.stderr) == [
        "other OTEL_* or QA_REDIS_OTEL_METRICS variables (read as a process starts)"]

    # The command's streams take its encodings (here from PYTHONIOENCODING).
    latin = subprocess.run(
        [sys.executable, "manage.py", "submit", "--queue", "no/é", "{}"], cwd=ROOT,
        env={**stack.env, "QA_COMMAND_SERVER": "verbose", "PYTHONIOENCODING": "latin-1"},
        capture_output=True, timeout=60)
    assert SERVED.search(latin.stderr.decode("latin-1")) and latin.returncode == 2
    assert "invalid queue name 'no/é'".encode("latin-1") in latin.stderr

    # A module file of the project changed since the stack started: run as edited (here).
    edited = ROOT / "core" / "cli" / "queuestat.py"
    before = edited.stat()
    os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    try:
        changed = _run(stack, "queuestat")
    finally:
        os.utime(edited, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert HERE.findall(changed.stderr) == ["the code changed since the stack started"]
    assert changed.returncode == 0 and "default" in changed.stdout
    assert SERVED.search(_run(stack, "queuestat").stderr)  # the same again: served

    # Not one of the operators' commands: never handed over (no line at all).
    help_ = _run(stack, "help")
    assert not SERVED.search(help_.stderr) and not HERE.search(help_.stderr)


def test_ctrl_c_reaches_the_command_and_a_killed_client_stops_it(stack: Stack) -> None:
    argv = [sys.executable, "manage.py", "submit", "--queue", "no-worker", "--any-handler",
            "--handler", "echo", "--wait", "--timeout", "60", "{}"]
    env = {**stack.env, "QA_COMMAND_SERVER": "verbose"}
    client = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert client.stdout is not None and client.stderr is not None
    assert client.stdout.readline().strip()  # the request id
    assert SERVED.search(client.stderr.readline())
    time.sleep(1.5)  # it waits (its progress is printed at the end: stderr is no terminal)
    client.send_signal(signal.SIGINT)
    _, err = client.communicate(timeout=20)
    assert client.returncode == 1
    assert "stopped waiting; request" in err and "keeps running in queue no-worker" in err

    # The client killed (no goodbye): its command ends as on Ctrl-C.
    client = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert client.stdout is not None and client.stderr is not None
    assert client.stdout.readline().strip()
    fork = int(SERVED.findall(client.stderr.readline())[0])
    time.sleep(1.5)
    assert pid_alive(fork)
    client.kill()
    client.wait(10)
    until(lambda: not pid_alive(fork), timeout=15)


def test_a_command_is_never_run_twice_when_the_client_gives_up_waiting(
        stack: Stack, tmp_path: Path) -> None:
    q = queue(stack, "once")
    before = _requests(q)

    # A client that hangs up after "ready", before "go": the fork runs nothing.
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(Path(stack.env["QA_VAR_DIR"]) / "run" / "commands.sock"))
        handoff.send(sock, {
            "argv": ["manage.py", "submit", "--queue", "once", "--any-handler", "--handler",
                     "echo", "{}"],
            "env": {**stack.env}, "cwd": str(ROOT), "interpreter": _interpreter_of_manage(),
            "base": str(ROOT)}, fds=[0, 1, 2])
        reply, _ = handoff.receive(sock)
        assert reply is not None and "ready" in reply, reply
        fork = int(reply["ready"])
    until(lambda: not pid_alive(fork), timeout=10)
    assert _requests(q) == before

    # The supervisor stopped (SIGSTOP) while a client connects: the client runs the command
    # itself after READY_TIMEOUT_S; the supervisor, let go on, does not run it again.
    # (Its output goes to files: the descriptors it handed over stay open in the waiting
    # connection until the supervisor takes it, and a pipe would not end before.)
    supervisor = stack.process.pid
    out, err = tmp_path / "out", tmp_path / "err"
    os.kill(supervisor, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with out.open("w") as stdout, err.open("w") as stderr:
            code = subprocess.run(
                [sys.executable, "manage.py", "submit", "--queue", "once", "--any-handler",
                 "--handler", "echo", "{}"], cwd=ROOT, stdout=stdout, stderr=stderr,
                env={**stack.env, "QA_COMMAND_SERVER": "verbose"}, timeout=60).returncode
        waited = time.monotonic() - started
    finally:
        os.kill(supervisor, signal.SIGCONT)
    assert code == 0, err.read_text()
    assert HERE.search(err.read_text()) and not SERVED.search(err.read_text())
    assert waited >= handoff.READY_TIMEOUT_S
    time.sleep(2)  # the supervisor accepts the connection that waited, and forks
    assert _requests(q) - before == {out.read_text().strip()}
    assert SERVED.search(_run(stack, "queuestat").stderr)  # and it serves as before


def _interpreter_of_manage() -> dict[str, object]:
    """handoff.interpreter() as `python manage.py` has it (its import path starts with the
    checkout), not as this test process has it."""
    probe = subprocess.run(
        [sys.executable, "-c", "import json, sys; sys.path[0] = sys.argv[1]; "
         "from queueadmin import handoff; print(json.dumps(handoff.interpreter()))", str(ROOT)],
        cwd=ROOT, capture_output=True, text=True, check=True)
    found: dict[str, object] = json.loads(probe.stdout)
    return found


def test_a_stack_that_runs_threads_forks_nothing(tmp_path: Path) -> None:
    """A stack that exports traces runs the SDK's export thread: a fork would copy the locks
    it holds, not the thread. Its commands run on their own, and say why."""
    with running_stack(tmp_path / "var", {"OTEL_TRACES_EXPORTER": "console"}) as traced:
        until(lambda: (tmp_path / "var" / "run" / "commands.sock").exists(), timeout=30)
        own = _run(traced, "queuestat")
    assert HERE.findall(own.stderr) == ["the stack runs threads"], own.stderr
    assert own.returncode == 0 and "default" in own.stdout


def test_without_a_stack_a_command_runs_in_its_own_process_and_says_so(tmp_path: Path) -> None:
    from tests.stack_support import migrated_sqlite

    migrated_sqlite(tmp_path / "var" / "db.sqlite3")
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run(
        [sys.executable, "manage.py", "submit", "--help"], cwd=ROOT, capture_output=True,
        text=True, timeout=60,
        env={**env, "QA_VAR_DIR": str(tmp_path / "var"), "QA_COMMAND_SERVER": "verbose"})
    assert done.returncode == 0 and "usage:" in done.stdout
    assert HERE.findall(done.stderr) == [
        f"no stack serves commands at {(tmp_path / 'var').resolve() / 'run' / 'commands.sock'}"]

"""The stack's command server: the operators' commands (`queueadmin datajob submit ...`,
`queuestat`, `requeue`, ...) run by a fork of the supervisor, which has Python, Django and the
commands' modules loaded, instead of a new process that loads them (0.3-0.45 s of each
command). The client's half, and what it promises, is queueadmin/handoff.py.

The supervisor listens on `<QA_VAR_DIR>/run/commands.sock` (mode 0600 in a folder of its
user's only) while the stack is up. For each connection from a process of the same user
(SO_PEERCRED), it forks; the fork (never the supervisor) reads the client's arguments,
environment, working directory and standard streams, and runs the command only if nothing
would differ from the client running it itself:

- the same interpreter and the same code (no module file of the packages changed since the
  server started: a checkout being edited is run as edited, by the client);
- the same settings: the settings module executed afresh with the client's environment and
  working directory gives the values it gave the supervisor's start (a different
  DATABASE_URL, QA_DATA_ROOTS, REDIS_URL, ... and the client runs the command itself).

Otherwise it says so and the client runs the command as before. The fork is a process of its
own session; it drops the supervisor's signal handlers, exit handlers, descriptors (the data
directory's lock, the listening socket) and database connections before it runs anything.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import importlib.util
import logging
import os
import select
import signal
import socket
import struct
import sys
import threading
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

from django.conf import settings
from django.utils.functional import Promise

from queueadmin import handoff

log = logging.getLogger("queueadmin.stack")

MAX_RUNNING = 16  # commands at once; a client past it runs its command itself
HELLO_TIMEOUT_S = 5.0  # from the connection to the client's arguments, and to its "go"
# Imported at the server's start so that no command pays for them: the commands' modules,
# and what they import only when they run. Not the checks' libraries (pyarrow, sqlglot: the
# check cache answers a repeated job without them, and they would hold ~60 MiB).
PRELOADED = (
    "core.cli.datajob", "core.cli.submit", "core.cli.queuestat", "core.cli.ops",
    "core.cli.schedule", "core.cli.workers", "core.cli.limits", "core.cli.alerts",
    "core.cli.tokens", "core.cli.retention", "core.ops.audit", "core.ops.actions",
    "core.ops.datajobs", "core.ops.errors", "core.pipeline.checkcache",
)
# Settings that only the supervisor reads, as it starts: the admin's password, which a
# command typed in another shell need not carry.
STACK_ONLY = frozenset({"QA_ADMIN_PASSWORD"})


class CommandServer:
    """The listening socket, and the forks running commands (reaped as they end)."""

    def __init__(self, path: Path, listener: socket.socket,
                 wake: tuple[socket.socket, socket.socket], settings_seen: dict[str, Any],
                 code_seen: dict[str, float]) -> None:
        self.path = path
        self.listener = listener
        # Python's signal wake-up descriptor (the write end) and its read end: a signal ends
        # a wait at once.
        self.wake, self.wake_w = wake
        self.settings_seen = settings_seen
        self.code_seen = code_seen
        self.interpreter = handoff.interpreter()
        self.running: set[int] = set()  # the forks' pids, until reaped

    @classmethod
    def open(cls, var_dir: Path) -> CommandServer | None:
        """Listen in var_dir/run, from the main thread of a process that has no other thread;
        None (said in the log) where it cannot, and every command runs in its own process."""
        path = Path(var_dir) / "run" / handoff.SOCKET_NAME
        if len(os.fsencode(path)) >= 108:
            log.info("commands are not served: %s is too long a path for a socket", path)
            return None
        if threading.current_thread() is not threading.main_thread():
            return None
        for name in PRELOADED:
            importlib.import_module(name)
        from django.core.management import get_commands, load_command_class

        commands = get_commands()
        for name in handoff.SERVED:
            if commands.get(name) == "core":
                load_command_class("core", name)
        path.parent.mkdir(mode=0o700, exist_ok=True)
        os.chmod(path.parent, 0o700)
        path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            listener.bind(os.fspath(path))
        finally:
            os.umask(old_umask)
        listener.listen(64)
        listener.setblocking(False)
        wake = socket.socketpair()
        for end in wake:
            end.setblocking(False)
        server = cls(path, listener, wake, fresh_settings(), code_files())
        signal.set_wakeup_fd(server.wake_w.fileno(), warn_on_full_buffer=False)
        return server

    def close(self) -> None:
        """Stop listening (a client then runs its command itself); forks that run go on."""
        signal.set_wakeup_fd(-1)
        self.listener.close()
        self.path.unlink(missing_ok=True)
        self.wake_w.close()
        self.wake.close()

    def wait(self, timeout: float) -> bool:
        """Serve the connections that come within `timeout` s; True when a signal came."""
        self.reap()
        try:
            readable, _, _ = select.select([self.listener, self.wake], [], [], timeout)
        except InterruptedError:  # pragma: no cover (Python retries select itself)
            return True
        signalled = False
        if self.wake in readable:
            signalled = True
            try:
                while self.wake.recv(64):
                    pass
            except BlockingIOError:
                pass
        if self.listener in readable:
            self._accept_all()
        return signalled

    def reap(self) -> None:
        for pid in list(self.running):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                self.running.discard(pid)

    def _accept_all(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("commands: accept failed: %s", exc)
                return
            try:
                self._fork(conn)
            finally:
                conn.close()

    def _fork(self, conn: socket.socket) -> None:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        refusal = ("another user" if uid != os.getuid()
                   else f"{MAX_RUNNING} commands running" if len(self.running) >= MAX_RUNNING
                   # A fork copies only the thread that forks, not the locks the others
                   # hold: the supervisor has one thread (and a second for a moment as a
                   # signal stops it, or for good when it exports traces: OTEL_*).
                   else "the stack runs threads" if threading.active_count() > 1
                   else "")
        if refusal:  # said (a few bytes: never blocks), then closed: the client runs it
            with contextlib.suppress(OSError):
                conn.setblocking(False)
                handoff.send(conn, {"refused": refusal})
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # not written twice, nor by the fork to the client's terminal
        pid = os.fork()
        if pid:
            self.running.add(pid)
            return
        code = 1
        try:
            code = _child(self, conn)
        except BaseException:  # the fork must never return into the supervisor's loop
            code = 1
        finally:
            os._exit(code)


def _child(server: CommandServer, conn: socket.socket) -> int:
    """In the fork: take the client's command, check that it would run the same here, run it
    with the client's environment and streams; its exit status. Never returns to the
    supervisor's loop (the caller exits)."""
    gc.freeze()  # the supervisor's objects: never collected here (their descriptors are gone)
    os.setsid()  # the terminal of `make run` no longer reaches it; the client's signals do
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    atexit._clear()  # the supervisor's exit handlers are not this process's
    keep = conn.fileno()
    os.closerange(3, keep)
    os.closerange(keep + 1, _max_fd())
    _forget_connections()

    conn.settimeout(HELLO_TIMEOUT_S)
    hello, fds = handoff.receive(conn, max_fds=3)
    if hello is None or len(fds) != 3:
        return 0
    reason = _refusal(server, hello)
    if reason:
        handoff.send(conn, {"refused": reason})
        return 0
    handoff.send(conn, {"ready": os.getpid()})
    go, _ = handoff.receive(conn)
    if not go or not go.get("go"):
        return 0  # the client gave up waiting and runs the command itself
    conn.settimeout(None)

    for sig in hello.get("ignored") or ():
        if sig in handoff.FORWARDED_NUMBERS:
            signal.signal(sig, signal.SIG_IGN)
    _adopt_streams(fds, hello.get("streams"))
    sys.argv = list(hello["argv"])
    threading.Thread(target=_listen, args=(conn,), name="client", daemon=True).start()
    code = _run(sys.argv)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    with contextlib.suppress(OSError):
        handoff.send(conn, {"exit": code})
    return code if code >= 0 else 128 - code


def _run(argv: list[str]) -> int:
    from queueadmin.main import main

    try:
        main(argv)
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        sys.stderr.write(f"{exc.code}\n")
        return 1
    except KeyboardInterrupt:
        # As Python ends on one: the traceback, then the process killed by SIGINT (the
        # client kills itself so, and its shell sees 130).
        traceback.print_exc()
        return -int(signal.SIGINT)
    except Exception:  # as Python ends on one: the traceback, status 1
        traceback.print_exc()
        return 1
    finally:
        atexit._run_exitfuncs()
    return 0


def _refusal(server: CommandServer, hello: dict[str, Any]) -> str:
    """Why the client must run the command itself ("" when nothing would differ). Leaves this
    process with the client's environment and working directory."""
    argv, env, cwd = hello.get("argv"), hello.get("env"), hello.get("cwd")
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv) and len(argv) > 1
            and isinstance(env, dict) and isinstance(cwd, str)):
        return "a malformed request"
    if argv[1] not in handoff.SERVED:
        return f"{argv[1]!r} is not served"
    if hello.get("base") != str(handoff.base_dir()):
        return "another copy of queueadmin"
    theirs = hello.get("interpreter")
    if not isinstance(theirs, dict):
        return "a malformed request"
    if {**theirs, "env": None} != {**server.interpreter, "env": None}:
        return "another interpreter, import path or interpreter options"
    if theirs.get("env") != server.interpreter["env"]:
        return "other OTEL_* or QA_REDIS_OTEL_METRICS variables (read as a process starts)"
    if code_files() != server.code_seen:
        return "the code changed since the stack started"
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in env.items()})
    try:
        os.chdir(cwd)
        seen = fresh_settings()
    except Exception as exc:  # the client's own run says what is wrong
        return f"the settings do not load here ({type(exc).__name__})"
    if seen != server.settings_seen:
        return "other settings"
    return ""


def fresh_settings() -> dict[str, Any]:
    """The settings module's values, executed afresh with this process's environment and
    working directory (not Django's settings object, which Django fills in as it runs); but
    those only the supervisor reads (STACK_ONLY)."""
    spec = importlib.util.find_spec(settings.SETTINGS_MODULE)
    if spec is None or spec.loader is None:
        raise ImportError(settings.SETTINGS_MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: _value(getattr(module, name)) for name in dir(module)
            if name.isupper() and name not in STACK_ONLY}


def _value(value: Any) -> Any:
    return str(value) if isinstance(value, Promise) else value


def code_files() -> dict[str, float]:
    """Every module file of the packages and when it last changed."""
    seen: dict[str, float] = {}
    for package in ("core", "queueadmin"):
        module: ModuleType = importlib.import_module(package)
        for top in module.__path__:
            for folder, dirs, files in os.walk(top):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                for name in files:
                    if name.endswith(".py"):
                        path = os.path.join(folder, name)
                        with contextlib.suppress(OSError):
                            seen[path] = os.stat(path).st_mtime
    return seen


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 65536


def _forget_connections() -> None:
    """The supervisor's database connections (it closes them after preparing; a copy of one
    must never be used by two processes): forgotten, not closed (a close would end the
    supervisor's session on the server)."""
    from django.db import connections

    for conn in connections.all(initialized_only=True):
        conn.connection = None


def _adopt_streams(fds: list[int], coding: Any) -> None:
    """The client's standard input, output and error as this process's 0, 1 and 2, and
    sys.stdin/stdout/stderr made afresh over them with the client's encodings (line-buffered
    on a terminal or with PYTHONUNBUFFERED, as Python makes them at its start)."""
    for target, fd in enumerate(fds):
        if fd != target:
            os.dup2(fd, target)
            os.close(fd)
    (in_enc, in_err), (out_enc, out_err), (err_enc, err_err) = _codings(coding)
    # Held by sys until the process exits (os._exit): no context manager.
    sys.stdin = open(0, encoding=in_enc, errors=in_err, closefd=False)  # noqa: SIM115
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))  # the client's, as `python -u`
    sys.stdout = open(1, "w", encoding=out_enc, errors=out_err,  # noqa: SIM115
                      closefd=False, buffering=1 if unbuffered or os.isatty(1) else -1)
    sys.stderr = open(2, "w", encoding=err_enc, errors=err_err,  # noqa: SIM115
                      closefd=False, buffering=1)


def _codings(coding: Any) -> list[tuple[str, str]]:
    """The client's (encoding, errors) of its three streams; UTF-8 where it sent none that
    Python knows."""
    import codecs

    out = []
    for i, default_errors in enumerate(("strict", "strict", "backslashreplace")):
        pair = coding[i] if isinstance(coding, list) and len(coding) == 3 else None
        enc, errors = (pair if isinstance(pair, list) and len(pair) == 2
                       and all(isinstance(x, str) for x in pair) else ("utf-8", default_errors))
        try:
            codecs.lookup(enc)
            codecs.lookup_error(errors)
        except LookupError:
            enc, errors = "utf-8", default_errors
        out.append((enc, errors))
    return out


def _listen(conn: socket.socket) -> None:
    """The client's signals, raised here; its end (killed) as a Ctrl-C."""
    while True:
        try:
            message, _ = handoff.receive(conn)
        except (OSError, ValueError):
            message = None
        if message is None:
            os.kill(os.getpid(), signal.SIGINT)
            return
        sig = message.get("signal")
        if isinstance(sig, int) and sig in handoff.FORWARDED_NUMBERS:
            os.kill(os.getpid(), sig)


"""A command handed to the running stack (the client's half: core/stack/commands.py serves).

Python, Django's setup and the command's imports are 0.3-0.45 s of every `queueadmin` command,
more than the README's data job takes on a warm Spark. The stack's supervisor (`runstack`)
has them loaded already: when it runs on this machine with the same data directory, a
command of the operators' (SERVED) is handed to it over a Unix socket in QA_VAR_DIR, and a
copy of the supervisor (a fork) runs the command as this process would have: with this
process's arguments, environment, working directory, standard input, output and error (the
file descriptors themselves), and its exit status comes back as this process's. Ctrl-C and
the other stop signals sent to this process are passed on; if this process dies, the
command gets a SIGINT, as from a Ctrl-C.

Nothing changes for the user but the time: the command runs itself, as before, whenever the
server is not there or says no (another user, other code or settings, a stack stopping,
QA_COMMAND_SERVER=off). The server never runs a command that this process may still run:
it waits for this process's "go", which is sent only once the server has said "ready", and
never after this process gave up waiting (it then runs the command itself).

This module is imported before Django: standard library only, a few milliseconds.
"""

from __future__ import annotations

import array
import contextlib
import json
import os
import signal
import socket
import struct
import sys
from pathlib import Path
from typing import Any

# The commands an operator types, which end on their own. Not the stack's own processes
# (runstack, runworker, runservices, ...), nor Django's commands (migrate, shell, ...), nor a
# command that prompts through the terminal itself (createuser: getpass opens /dev/tty).
SERVED = frozenset({
    "alert", "cancel", "claim", "datajob", "limit", "pause", "prune", "queuestat", "release",
    "requeue", "resume", "retention", "schedule", "submit", "token", "worker",
})
# "off": every command runs in a process of its own; "verbose": the command says on stderr
# whether the stack ran it, and if not, why.
ENV_SWITCH = "QA_COMMAND_SERVER"
SOCKET_NAME = "commands.sock"  # in QA_VAR_DIR/run
READY_TIMEOUT_S = 1.0  # from connecting to the server's "ready"; then this process runs it
HEADER = struct.Struct("!I")
MAX_MESSAGE = 4 << 20
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
FORWARDED_NUMBERS = frozenset(int(s) for s in FORWARDED)  # as they travel in messages


def base_dir() -> Path:
    """Where the queueadmin and core packages are (queueadmin.settings.BASE_DIR)."""
    return Path(__file__).resolve().parent.parent


def socket_path(environ: Any = os.environ) -> Path:
    """The server's socket: in QA_VAR_DIR as queueadmin.settings finds it (which the server
    checks again: settings that differ in any way are refused)."""
    base = base_dir()
    checkout = (base / "manage.py").is_file() and (base / "pyproject.toml").is_file()
    var_dir = Path(environ.get("QA_VAR_DIR") or (base if checkout else Path.cwd()) / "var")
    return var_dir.resolve() / "run" / SOCKET_NAME


def interpreter() -> dict[str, Any]:
    """What makes one Python process run the same code as another: the interpreter, where
    it imports from, its options (-X, -W, -O, ...)."""
    return {"executable": sys.executable, "path": list(sys.path), "flags": list(sys.flags),
            "xoptions": {k: str(v) for k, v in sys._xoptions.items()},
            "warnoptions": list(sys.warnoptions),
            # Read as the process starts, outside the settings: tracing (OTEL_*, set up with
            # Django), redis-py's metrics (QA_REDIS_OTEL_METRICS, as it is imported).
            "env": {k: v for k, v in os.environ.items()
                    if k.startswith("OTEL_") or k == "QA_REDIS_OTEL_METRICS"}}


def streams() -> list[list[str]]:
    """The encoding and error handler of sys.stdin, stdout and stderr (from the locale,
    PYTHONIOENCODING, PYTHONUTF8), which the command's streams take."""
    return [[getattr(f, "encoding", None) or "utf-8", getattr(f, "errors", None) or "strict"]
            for f in (sys.stdin, sys.stdout, sys.stderr)]


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = HEADER.pack(len(data)) + data
    if fds:
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())]
        sent = sock.sendmsg([payload], ancillary)
        payload = payload[sent:]
    if payload:
        sock.sendall(payload)


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict[str, Any] | None, list[int]]:
    """One message (None at the end of the stream) and the descriptors it carried."""
    fds: list[int] = []
    head = b""
    while len(head) < HEADER.size:
        if max_fds and not fds:
            chunk, ancdata, _flags, _addr = sock.recvmsg(
                HEADER.size - len(head), socket.CMSG_SPACE(max_fds * array.array("i").itemsize))
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    carried = array.array("i")
                    carried.frombytes(data[:len(data) - len(data) % carried.itemsize])
                    fds.extend(carried)
        else:
            chunk = sock.recv(HEADER.size - len(head))
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        head += chunk
    (size,) = HEADER.unpack(head)
    if size > MAX_MESSAGE:
        raise ValueError(f"a message of {size} bytes")
    body = b""
    while len(body) < size:
        chunk = sock.recv(min(size - len(body), 1 << 16))
        if not chunk:
            raise ValueError("the stream ended inside a message")
        body += chunk
    message = json.loads(body)
    if not isinstance(message, dict):
        raise ValueError("a message that is not an object")
    return message, fds


def run_served(argv: list[str]) -> int | None:
    """The command's exit status when the stack's server ran it; None when this process is to
    run it (the server is not there, or said no, or did not answer in time)."""
    if not _eligible(argv):
        return None
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)  # a closed standard stream cannot be handed over
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:
        return None
    try:
        try:
            return _handed(sock, argv)
        except (FileNotFoundError, ConnectionRefusedError):
            _say(f"runs in this process: no stack serves commands at {socket_path()}")
            return None
        except (OSError, ValueError) as exc:
            _say(f"runs in this process: {exc or type(exc).__name__}")
            return None
    finally:
        sock.close()


def _say(what: str) -> None:
    if os.environ.get(ENV_SWITCH, "").strip().lower() == "verbose":
        sys.stderr.write(f"queueadmin: {what}\n")


def _eligible(argv: list[str]) -> bool:
    if os.environ.get(ENV_SWITCH, "").strip().lower() in ("off", "0", "no", "false"):
        return False
    if len(argv) < 2 or argv[1] not in SERVED:
        return False
    if os.environ.get("DJANGO_SETTINGS_MODULE", "queueadmin.settings") != "queueadmin.settings":
        return False
    # Left to Django: another settings module or import path, or a traceback asked for.
    return not any(a.startswith(("--settings", "--pythonpath")) for a in argv[2:])


def _handed(sock: socket.socket, argv: list[str]) -> int | None:
    path = socket_path()
    if len(os.fsencode(path)) >= 108:  # sockaddr_un's limit: the server made none there
        return None
    sock.settimeout(READY_TIMEOUT_S)
    sock.connect(os.fspath(path))
    # Signals this process ignores (a background job's SIGINT, nohup's SIGHUP) are ignored by
    # the command too, and not passed on.
    ignored = [int(s) for s in FORWARDED if signal.getsignal(s) == signal.SIG_IGN]
    # Refused before it read this (a broken pipe): why is the reply.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        send(sock, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd(),
                    "interpreter": interpreter(), "base": str(base_dir()), "ignored": ignored,
                    "streams": streams()},
             fds=[0, 1, 2])
    reply, _ = receive(sock)
    if reply is None or "ready" not in reply:
        _say(f"runs in this process: {reply.get('refused') if reply else 'no answer'}")
        return None
    _say(f"run by the stack (pid {reply['ready']})")
    # Committed from here: the server runs the command once it reads this. Errors of the
    # connection after it are the command's end, not a reason to run it here as well.
    send(sock, {"go": True})
    try:
        return _followed(sock, ignored)
    except Exception as exc:  # never None from here: the command may have run
        sys.stderr.write(f"queueadmin: lost the command's process ({exc})\n")
        return 1


def _followed(sock: socket.socket, ignored: list[int]) -> int:
    """The exit status of the command the server runs, signals passed on meanwhile."""
    sock.settimeout(None)
    # Passed on until this process exits (not restored: a signal that comes as the command
    # ends is passed on to nothing rather than raised here).
    for sig in FORWARDED:
        if sig not in ignored:
            signal.signal(sig, _passer(sock))
    while True:
        try:
            reply, _ = receive(sock)
        except (OSError, ValueError):
            reply = None
        if reply is None:
            sys.stderr.write("queueadmin: the command's process ended without an exit "
                             "status (killed?)\n")
            return 1
        if "exit" in reply:
            code = int(reply["exit"])
            if code < 0 and -code in FORWARDED_NUMBERS:
                # Ended by that signal (an uncaught Ctrl-C): so does this process.
                sys.stdout.flush()
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            return code if code >= 0 else 128 - code


def _passer(sock: socket.socket) -> Any:
    def pass_on(signum: int, frame: Any) -> None:
        with contextlib.suppress(OSError):
            send(sock, {"signal": int(signum)})

    return pass_on

"""Processes and ports of this machine: whether a pid lives, a free port, whether something
listens on a port. A leaf (the standard library only), so that the stack, the pipeline and the
tests can all import it downwards.
"""

from __future__ import annotations

import os
import random
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# Ports handed out are taken below the kernel's ephemeral range (where every bind to port 0 and
# every outgoing connection draws its port): from there, another process could be given the
# same port, or connect from it, between this answer and the bind of the server it is for
# (seen in the test suite: a stack's gunicorn found its port taken by another test's Redis).
# A port handed out is reserved for RESERVED_S on this machine (a file in PORTS_DIR).
PORTS_SPAN = 12_000
PORTS_DIR = Path(tempfile.gettempdir()) / "queueadmin-ports"
RESERVED_S = 120.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now and that no caller on this
    machine was given in the last RESERVED_S seconds."""
    low = _ephemeral_low()
    if low - PORTS_SPAN >= 1024:
        for _ in range(100):
            port = random.randrange(low - PORTS_SPAN, low)
            if port_free(port) and _reserve(port):
                return port
    with socket.socket() as s:  # no range of our own here: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _reserve(port: int) -> bool:
    """True if `port` was not handed out on this machine in the last RESERVED_S (now it is)."""
    path = PORTS_DIR / str(port)
    try:
        PORTS_DIR.mkdir(mode=0o1777, exist_ok=True)
        try:
            if time.time() - path.stat().st_mtime < RESERVED_S:
                return False
            path.unlink(missing_ok=True)  # an old reservation
        except FileNotFoundError:
            pass
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    except FileExistsError:
        return False  # another process reserved it just now
    except OSError:
        return True  # no reservations here (a read-only or foreign folder): the bind check
    return True


def port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def listening(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError:
        return False
    return True


def wait_listening(host: str, port: int, *, timeout: float, alive: object = None) -> bool:
    """Until something listens on host:port (True) or `timeout` s pass (False); `alive`, a
    callable, stops the wait early when it says the server died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listening(host, port):
            return True
        if callable(alive) and not alive():
            return False
        time.sleep(0.1)
    return False


def set_from_signal(event: threading.Event) -> Callable[[int, Any], None]:
    """A signal handler that sets `event`. Not `event.set()` itself: Python runs a handler in
    the main thread between two bytecodes, maybe while that thread is inside the same Event's
    wait() or set() and holds its lock (a Lock, not reentrant), and set() would then wait for
    itself forever (a `runmirror` child hung so when two SIGTERMs came close together). A
    thread of its own sets it once that lock is free; a second signal adds nothing."""

    def handle(signum: int, frame: Any) -> None:
        if not event.is_set():
            threading.Thread(target=event.set, name="stop-signal", daemon=True).start()

    return handle

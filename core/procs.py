"""Processes and ports of this machine: whether a pid lives, a free port, whether something
listens on a port. A leaf (the standard library only), so that the stack, the pipeline and the
tests can all import it downwards.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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

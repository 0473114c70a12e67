"""The `make` that started the stack, when one did: make passes SIGTERM on to the supervisor
but not SIGINT (it leaves that to the terminal), so the supervisor watches it for one."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass



class MakeParent:
    """The `make` this supervisor runs under (`make run`), watched for a SIGINT sent to it.

    GNU make passes SIGTERM on to its children but not SIGINT: it expects the terminal to have
    sent Ctrl-C's SIGINT to the whole foreground process group, so it only waits for its
    children to exit, forever when they never got it (`kill -INT <pid of make>`). What it
    does first is restore SIGINT's default action (so that it can kill itself with it once its
    children are gone), which /proc shows: the signal leaves its set of caught signals. A make
    that ignored SIGINT from the start (`make run &` in a script: the shell makes background
    jobs ignore it) never sees it at all; nothing can be done about that here.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid

    @staticmethod
    def _catches_sigint(pid: int) -> bool | None:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return None
        for line in status.splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) >> (signal.SIGINT - 1) & 1)
        return None

    @classmethod
    def find(cls) -> MakeParent | None:
        """The parent process if it is a make that catches SIGINT now, else None."""
        pid = os.getppid()
        try:
            name = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return None
        if name not in ("make", "gmake") or not cls._catches_sigint(pid):
            return None
        return cls(pid)

    def stop_reason(self) -> str | None:
        """Why the stack must stop: make took a SIGINT (it no longer catches it), or it is
        gone (killed: nothing would be left to stop the stack); None while it waits."""
        if os.getppid() != self.pid:
            return f"the exit of make (pid {self.pid})"
        if self._catches_sigint(self.pid) is False:
            return f"SIGINT (sent to make, pid {self.pid})"
        return None

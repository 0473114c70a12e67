"""One stack per data directory: `runstack` holds an flock on `<var>/stack.lock` for as long
as it runs, and hands it to its redis-server, so two stacks never append to one
append-only file, even when the first supervisor was killed and left its Redis running.

The file records who holds it ("runstack=<pid>", "redis-server=<pid>" lines) for the
message a second stack prints. It is never deleted: unlinking a lock file lets two processes
lock two different files of the same name.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from core.queue.errors import QueueadminError

LOCK_NAME = "stack.lock"


class StackError(QueueadminError):
    """Root of what the embedded stack (core.stack, its lock, its redis-server) raises."""


class DataDirBusy(StackError):
    """Another stack holds the lock; `holders` maps each recorded role to its pid."""

    def __init__(self, path: Path, holders: dict[str, int]) -> None:
        self.path = path
        self.holders = holders
        super().__init__(f"{path} is locked by {holders or 'a process that did not say'}")


class DataDirLock:
    """The held lock on a data directory. Release it with close(); it is released anyway when
    this process and every process it was handed to have exited."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd
        self._holders: dict[str, int] = {}

    def record(self, role: str, pid: int) -> None:
        """Write down that `role` (pid `pid`) holds the lock, for whoever finds it taken."""
        self._holders[role] = pid
        text = "".join(f"{r}={p}\n" for r, p in self._holders.items()).encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, text, 0)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _holders(text: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in text.splitlines():
        role, _, pid = line.partition("=")
        if pid.strip().isdigit():
            found[role.strip()] = int(pid)
    return found


def lock_data_dir(var_dir: Path) -> DataDirLock:
    """Take the lock of `var_dir` (created if missing) at once, or raise DataDirBusy."""
    var_dir.mkdir(parents=True, exist_ok=True)
    path = var_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 4096, 0).decode(errors="replace")
        os.close(fd)
        raise DataDirBusy(path, _holders(text)) from None
    except BaseException:
        os.close(fd)
        raise
    lock = DataDirLock(path, fd)
    lock.record("runstack", os.getpid())
    return lock

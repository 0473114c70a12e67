"""`runmirror --processes N`: the mirror as N processes, consumers of one group on each queue's
streams. This process is the first of them (it keeps house: samples, metrics, schedules,
refresh); it starts the others as `runmirror --consumer NAME-i --no-housekeeping`, starts again
one that dies (it re-reads the entries it had pending; meanwhile the others take them over
after --claim-after seconds, core.mirror.commit), and stops them when it stops.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

log = logging.getLogger("queueadmin.mirror")

RESTART_AFTER_S = 1.0  # a child that died is started again this long after


def child_argv(base: Sequence[str], consumer: str) -> list[str]:
    """The command line of one child: `base` (the queues, group, batch, claim-after options)
    with its consumer name (`python -m queueadmin`: the settings of this process's environment)."""
    return [sys.executable, "-m", "queueadmin", "runmirror", *base, "--consumer", consumer,
            "--no-housekeeping"]


def _stop_with_parent() -> None:
    """In a child, before it runs: SIGTERM when its parent dies, even by SIGKILL (Linux's
    PR_SET_PDEATHSIG), so that no mirror outlives its runmirror; elsewhere nothing."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


class Children:
    """The other mirror processes of this one: started, kept running, stopped."""

    def __init__(self, argvs: list[list[str]]) -> None:
        self.argvs = argvs
        self.stop = threading.Event()
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * len(argvs)
        self.restarts = 0
        self._thread = threading.Thread(target=self._watch, name="mirror-children",
                                        daemon=True)

    def start(self) -> None:
        for i in range(len(self.argvs)):
            self._spawn(i)
        self._thread.start()

    def _spawn(self, i: int) -> None:
        self.procs[i] = subprocess.Popen(self.argvs[i], env=os.environ.copy(),
                                         preexec_fn=_stop_with_parent)

    def _watch(self) -> None:
        while not self.stop.wait(RESTART_AFTER_S):
            for i, proc in enumerate(self.procs):
                if proc is not None and proc.poll() is not None and not self.stop.is_set():
                    log.warning("mirror: process %s (pid %d) exited with %s; starting it again",
                                self.argvs[i][-2], proc.pid, proc.returncode)
                    self.restarts += 1
                    self._spawn(i)

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p is not None]

    def close(self, timeout: float = 30.0) -> None:
        """SIGTERM every child (each finishes its batch), then wait for them."""
        self.stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
        for proc in self.procs:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            if proc is None:
                continue
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

"""The stack's children: what each is (ChildSpec), each one running (Child), and their
supervision: started, watched, started again (a worker, with its leases reclaimed at once)
or the stack stopped, and every one stopped by PID at the end."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from django.conf import settings
from django.core.management.base import CommandError

from core.stack.make_parent import MakeParent

if TYPE_CHECKING:
    from core.stack.commands import CommandServer


STOP_TIMEOUT_S = 10.0
RESTART_LIMIT = 5  # exits in a row, each within QUICK_EXIT_S of its start, before giving up
QUICK_EXIT_S = 30.0
RESTART_DELAY_S = 1.0  # doubled after each quick exit
POLL_S = 0.5


@dataclass(frozen=True)
class ChildSpec:
    """A service the supervisor runs: its name (for messages) and command line. A child with
    `restart` is started again when it exits (a worker stops itself when its Spark JVM dies,
    and its leases are recovered); any other child's exit stops the stack."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    restart: bool = False
    oneshot: bool = False  # runs once and exits (0: done; else a warning): the Spark warm-up
    before: Callable[[], None] | None = None  # run before each start (the server's scratch)
    # A worker of this queue: named by the supervisor at each start, so that when its process
    # exits the supervisor reaps its leases at once rather than after --dead-after.
    worker_queue: str | None = None


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    spec: ChildSpec | None = None
    started: float = field(default_factory=time.monotonic)
    # Exits soon after a start, in a row: each doubles the wait before the next start, and
    # RESTART_LIMIT of them stop the stack (a worker that cannot start is not retried forever).
    quick_exits: int = 0
    restart_at: float | None = None  # when to start it again, while it is down
    worker_name: str | None = None  # a worker's --name in this life
    lives: int = 0


def command(*args: str) -> list[str]:
    """The command line of `queueadmin <args>` in a child process: this interpreter running the
    package (`-m queueadmin`), from a checkout or a wheel alike; -P keeps the working directory
    off its import path, so that a `core` package there cannot stand in for the project's."""
    return [sys.executable, "-P", "-m", "queueadmin", *args]


class Supervision:
    """The part of Stack (a mixin) that runs its children."""

    children: list[Child]
    commands: CommandServer | None  # the operators' commands, run by forks of this process
    make_parent: MakeParent | None
    out: TextIO
    redis_url: str
    stop_requested: threading.Event
    stop_signal: str | None
    var_dir: Path

    def _spawn(self, spec: ChildSpec, replacing: Child | None = None) -> None:
        if spec.before is not None:
            spec.before()
        lives = replacing.lives + 1 if replacing is not None else 1
        argv, worker_name = spec.argv, None
        if spec.worker_queue is not None:
            worker_name = f"{socket.gethostname()}-{os.getpid()}-{spec.name}.{lives}"
            argv = [*argv, "--name", worker_name]
        env = {**self._child_env(), **spec.env}
        # Each child in its own session: a terminal's Ctrl-C reaches only this supervisor, which
        # then stops the children one by one (workers first, Redis last), so workers get one
        # SIGTERM and finish or release their tasks while Redis still answers. In this process's
        # working directory, so that paths in the environment mean the same to them.
        process = subprocess.Popen(argv, env=env, start_new_session=True)
        if replacing is None:
            self.children.append(Child(spec.name, process, spec, worker_name=worker_name,
                                       lives=lives))
        else:  # same place in the list: the stop order stays workers first, Redis last
            replacing.process, replacing.restart_at = process, None
            replacing.started = time.monotonic()
            replacing.worker_name, replacing.lives = worker_name, lives
        self.out.write(f"{spec.name} (pid {process.pid}) started\n")

    def _child_env(self) -> dict[str, str]:
        """The environment of the services: this one, with the stack's Redis and data
        directory, and the code this process runs first on the import path (a checkout's)."""
        env = {**os.environ, "REDIS_URL": self.redis_url, "QA_VAR_DIR": str(self.var_dir)}
        env.setdefault("DJANGO_SETTINGS_MODULE", "queueadmin.settings")
        # glibc's malloc gives each thread that allocates an arena of its own (up to 8 per
        # core), which a worker's slots, gRPC's and Arrow's threads keep half empty: two hold
        # its RSS down (as the Spark server's, core.pipeline.server.env).
        env.setdefault("MALLOC_ARENA_MAX", "2")
        if settings.CODE_PATH:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (settings.CODE_PATH, env.get("PYTHONPATH", "")) if p)
        return env

    def _supervise(self) -> None:
        while True:
            if self.commands is None:
                self.stop_requested.wait(POLL_S)
            elif self.commands.wait(POLL_S):
                # A signal: its handler sets stop_requested from a thread (set_from_signal).
                self.stop_requested.wait(0.1)
            if self.stop_requested.is_set():
                return
            self._poll()

    def _poll(self) -> None:
        self._check_children()
        reason = self.make_parent.stop_reason() if self.make_parent else None
        if reason:
            self.stop_signal = reason
            self.stop_requested.set()

    def _check_children(self) -> None:
        now = time.monotonic()
        for child in list(self.children):
            if child.restart_at is not None:
                if now >= child.restart_at and child.spec is not None:
                    self._spawn(child.spec, replacing=child)
                continue
            code = child.process.poll()
            if code is None:
                continue
            spec = child.spec
            if spec is not None and spec.oneshot:
                self.children.remove(child)
                if code != 0:
                    self.out.write(f"warning: {child.name} (pid {child.process.pid}) exited "
                                   f"with code {code} (its output above says why)\n")
                continue
            if self._stopped_on_request(child):
                self.children.remove(child)
                self.out.write(
                    f"{child.name} (pid {child.process.pid}) exited with code {code}: an "
                    "operator stopped it (the workers page, or `manage.py worker stop`); not "
                    "started again until the stack is restarted\n")
                self.out.flush()
                continue
            if spec is None or not spec.restart:
                raise CommandError(
                    f"{child.name} (pid {child.process.pid}) exited with code {code}; "
                    "stopped the rest of the stack (its output above says why)"
                )
            quick = now - child.started < QUICK_EXIT_S
            child.quick_exits = child.quick_exits + 1 if quick else 0
            if child.quick_exits >= RESTART_LIMIT:
                raise CommandError(
                    f"{child.name} (pid {child.process.pid}) exited with code {code}, the "
                    f"{RESTART_LIMIT}th time in a row within {QUICK_EXIT_S:g} s of starting; "
                    "stopped the rest of the stack (its output above says why)"
                )
            delay = RESTART_DELAY_S * 2 ** max(0, child.quick_exits - 1)
            child.restart_at = now + delay
            self.out.write(
                f"{child.name} (pid {child.process.pid}) exited with code {code}; starting it "
                f"again in {delay:g} s ({self._recover(child)})\n"
            )
            self.out.flush()

    def _stopped_on_request(self, child: Child) -> bool:
        """Whether an operator stopped this worker (Queue.control_worker): it says so in Redis
        for an hour after its exit. A worker stopped so stays stopped: the operator meant it
        (a worker that is only to take no work for a while is quieted instead). A Redis that
        does not answer: not known, so the worker is started again as after any exit."""
        if child.spec is None or child.spec.worker_queue is None or child.worker_name is None:
            return False
        from core.queue import Queue, QueueError

        try:
            q = Queue.from_url(self.redis_url, child.spec.worker_queue,
                               prefix=settings.QUEUE_PREFIX)
            try:
                return bool(q.worker_control(child.worker_name) == "stop")
            finally:
                q.redis.close()
        except QueueError:
            return False

    def _recover(self, child: Child) -> str:
        """Reap the leases of a worker whose process exited: it runs nothing any more, so its
        tasks need not wait for its leases to expire (each delivery counts as an attempt, as
        the reaper counts it). Says what became of them."""
        if child.spec is None or child.spec.worker_queue is None or child.worker_name is None:
            return "its tasks are recovered when their leases expire"
        from core.queue import Queue, QueueError

        try:
            q = Queue.from_url(self.redis_url, child.spec.worker_queue,
                               prefix=settings.QUEUE_PREFIX)
            try:
                back, cancelled = q.reclaim_worker(child.worker_name, crashed=True)
            finally:
                q.redis.close()
        except QueueError as exc:  # not registered yet, or Redis away: the reaper does it
            return f"its tasks are recovered when their leases expire ({exc})"
        return (f"{back} of its tasks back to waiting now" if back or not cancelled else
                f"{cancelled} of its tasks dropped as cancelled")

    def stop_all(self) -> None:
        """Stop every child this supervisor started: SIGTERM to all services at once (workers
        finish or release their tasks in parallel), SIGKILL after STOP_TIMEOUT_S; then Spark,
        then Redis, once nothing needs them any more."""
        last = ("spark", "redis-server")  # the workers finish their chunks on Spark first
        spark_children = [c for c in self.children if c.name == "spark"]
        redis_children = [c for c in self.children if c.name == "redis-server"]
        services = [c for c in reversed(self.children) if c.name not in last]
        self.children.clear()
        for group in (services, spark_children, redis_children):
            for child in group:
                if child.process.poll() is None:
                    child.process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            for child in group:
                p = child.process
                try:
                    p.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.out.write(f"{child.name} (pid {p.pid}) ignored SIGTERM; killing it\n")
                    p.kill()
                    p.wait()

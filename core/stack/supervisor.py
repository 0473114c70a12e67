"""`queueadmin runstack` (`manage.py runstack` in a checkout: what `make run` runs): the whole
single-machine stack under one supervisor.

Takes the lock of the data directory (one stack per QA_VAR_DIR), starts the project's own
redis-server (unless REDIS_URL is set in the environment) and Spark Connect server (unless
SPARK_REMOTE or SPARK_MASTER is set: core/pipeline/server.py), prepares the database, static
files and the admin user while Spark starts, then runs the services (gunicorn, workers, and
`runservices`: the mirror, the bulk actions and the scheduler) as child processes, each in its
own session, and warms Spark with a first job.
Ctrl-C, SIGINT, SIGTERM or SIGHUP (to this process, or SIGINT to the `make` that started it)
stops every child it started, by PID, services first, then Spark, Redis last, and exits 0; a
child that dies on its own stops the rest and fails (a worker or Spark is started again, but
a worker that an operator stopped from the console or `manage.py worker stop` stays stopped
until the stack is restarted).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from core.conf import redacted
from core.stack.lock import DataDirBusy, DataDirLock, lock_data_dir
from core.stack.redis_server import pid_alive, start_redis

STOP_TIMEOUT_S = 10.0
RESTART_LIMIT = 5  # exits in a row, each within QUICK_EXIT_S of its start, before giving up
QUICK_EXIT_S = 30.0
RESTART_DELAY_S = 1.0  # doubled after each quick exit
POLL_S = 0.5
LISTEN_TIMEOUT_S = 30.0
ADMIN_USERNAME = "admin"
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# What in QA_VAR_DIR is its user's only (the directory itself is 0700): the secret key, the
# admin's password, the SQLite database and the files SQLite keeps beside it.
PRIVATE_FILES = ("secret_key", "admin_password", "db.sqlite3", "db.sqlite3-journal",
                 "db.sqlite3-wal", "db.sqlite3-shm", "stack.lock")
# Task slots per worker. A data chunk's work is the Spark server's, not the worker's: with two
# slots each, two workers keep four chunks in Spark, whose fixed costs (planning, scheduling,
# committing) then overlap with the others' work on the cores.
WORKER_SLOTS = 2
# What QA_REDIS_FSYNC may say, and what each promises (also in the README).
FSYNC_CHOICES = {
    "always": "an acknowledged write survives a crash of redis-server or of the machine",
    "everysec": "a crash of redis-server or of the machine can lose up to about 1 s of "
    "acknowledged writes",
}


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


class Stack:
    def __init__(self, *, host: str, port: int, out: TextIO, workers: int = 2,
                 slots: int = WORKER_SLOTS) -> None:
        self.host = host
        self.port = port
        self.workers = workers
        self.slots = slots
        self.out = out
        self.var_dir = Path(settings.VAR_DIR)
        self.embedded_redis = bool(settings.EMBEDDED_REDIS)
        self.redis_url: str = settings.REDIS_URL
        self.fsync: str = settings.EMBEDDED_REDIS_FSYNC
        self.embedded_spark = bool(settings.EMBEDDED_SPARK)
        self.spark_url: str | None = None  # the embedded Connect server's, once started
        self.children: list[Child] = []
        self.stop_requested = threading.Event()
        self.stop_signal: str | None = None
        self.lock: DataDirLock | None = None
        self.make_parent = MakeParent.find()

    # -- the steps ------------------------------------------------------------------------

    def run(self) -> None:
        """Start everything, supervise until a signal or a child's death, stop everything."""
        if self.embedded_redis and self.fsync not in FSYNC_CHOICES:
            raise CommandError(
                f"QA_REDIS_FSYNC must be 'always' (the default: {FSYNC_CHOICES['always']}) or "
                f"'everysec' (faster: {FSYNC_CHOICES['everysec']}), not {self.fsync!r}"
            )
        self.lock = self._lock_data_dir()
        previous = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        try:
            self._make_private()
            self._check_port_free(self.host, self.port, "PORT / HOST")
            if self.embedded_redis:
                self._start_embedded_redis()
            if self.embedded_spark and not self.stop_requested.is_set():
                self._start_embedded_spark()  # its JVM starts while the database is prepared
            if not self.stop_requested.is_set():
                self._prepare()
            for spec in self.services():
                if self.stop_requested.is_set():
                    break
                self._spawn(spec)
            if not self.stop_requested.is_set() and self._wait_listening():
                self._announce()
                self._supervise()
        finally:
            self.stop_all()
            self.lock.close()  # a redis-server that is still running keeps holding it
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if self.stop_signal:
            self.out.write(f"stopped on {self.stop_signal}\n")

    def services(self) -> list[ChildSpec]:
        """The long-running processes, started in this order and stopped in reverse."""
        bind = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        # gunicorn believes X-Forwarded-Proto from 127.0.0.1 unless told otherwise, and the
        # request would then be "secure" (Secure cookies over plain HTTP): only when
        # QA_TRUST_X_FORWARDED_PROTO says a proxy sets it is it believed (by Django).
        trusted = getattr(settings, "SECURE_PROXY_SSL_HEADER", None) is not None
        specs = [
            ChildSpec(
                "gunicorn",
                [
                    sys.executable, "-m", "gunicorn", "queueadmin.wsgi:application",
                    "--bind", bind, "--workers", "2", "--graceful-timeout", "5",
                    *(["--access-logfile", settings.ACCESS_LOG] if settings.ACCESS_LOG else []),
                    *([] if trusted else ["--forwarded-allow-ips", ""]),
                ],
            ),
        ]
        # Workers get a grace period shorter than STOP_TIMEOUT_S, so on Ctrl-C they finish or
        # release their tasks before the supervisor would have to kill them.
        # With the embedded Spark, SPARK_REMOTE tells them where it is, and that they wait for
        # it before their first task.
        worker_env = {"SPARK_REMOTE": self.spark_url} if self.spark_url else {}
        specs += [
            ChildSpec(
                f"worker-{i}",
                [
                    *command("runworker", "--queue", "default"),
                    "--grace", str(max(1.0, STOP_TIMEOUT_S - 3)), "--slots", str(self.slots),
                ],
                env=worker_env,
                restart=True,
                worker_queue="default",
            )
            for i in range(1, self.workers + 1)
        ]
        if self.spark_url:  # a first job, so that the user's first job finds Spark warm
            specs.append(ChildSpec("spark-warmup", command("warmspark", "--url", self.spark_url),
                                   oneshot=True))
        # One process of three threads: the database's history of every queue in the registry
        # (requests, dead letters, counter samples for the console's charts), the console's
        # bulk actions (requeue, delete, cancel of a filter's snapshot, chunk by chunk: a web
        # request only records them), and the recurring schedules (any number of schedulers
        # may run: one on another machine only takes over the slots of one that died). As
        # three processes they held 88 MiB each, mostly Python, Django and redis-py.
        specs.append(ChildSpec("services", command("runservices"), restart=True))
        return specs

    def _lock_data_dir(self) -> DataDirLock:
        try:
            return lock_data_dir(self.var_dir)
        except DataDirBusy as busy:
            alive = {r: p for r, p in busy.holders.items() if pid_alive(p)}
            held_by = ", ".join(f"{r} pid {p}" for r, p in alive.items()) or "a process"
            raise CommandError(
                f"another stack is using QA_VAR_DIR={self.var_dir} ({busy.path} is held by "
                f"{held_by}). Stop that one first, or give this one a directory of its own: "
                "QA_VAR_DIR=/some/other/dir"
            ) from None
        except OSError as exc:
            raise CommandError(
                f"cannot lock QA_VAR_DIR={self.var_dir}: {exc.strerror} ({exc.filename})"
            ) from exc

    def _start_embedded_redis(self) -> None:
        port = int(settings.EMBEDDED_REDIS_PORT)
        self._check_port_free(
            "127.0.0.1", port, "the embedded redis-server's port",
            hint="another `make run` may be running, or a redis-server left over from one",
        )
        try:
            # It holds the data directory's lock too, so the lock lasts as long as the data is
            # in use, even if this supervisor is killed and leaves it running.
            assert self.lock is not None
            server = start_redis(
                self.var_dir / "redis", port=port, appendonly=True, fsync=self.fsync,
                pass_fds=[self.lock.fd],
            )
        except RuntimeError as exc:
            raise CommandError(f"could not start the embedded redis-server: {exc}") from exc
        self.children.append(Child("redis-server", server.process))
        self.lock.record("redis-server", server.pid)
        self.redis_url = server.url
        self.out.write(
            f"redis-server (pid {server.pid}) on {server.url}, data in {server.data_dir}, "
            f"appendfsync {self.fsync} ({FSYNC_CHOICES[self.fsync]})\n"
        )

    def _start_embedded_spark(self) -> None:
        from core.pipeline import jvm, server

        config = server.settings_config(self.var_dir)
        self._check_port_free(
            "127.0.0.1", config.port, "the embedded Spark Connect server's port (QA_SPARK_PORT)",
            hint="another `make run` may be running",
        )
        try:
            jar: Path | None = jvm.ensure_jar(self.var_dir / "spark" / "jars")
        except jvm.JarBuildError as exc:
            jar = None
            self.out.write(f"warning: {exc}; data jobs read a slice inside a file by reading "
                           "the whole file instead\n")
        config = dataclasses.replace(config, jar=jar)
        self._spawn(ChildSpec("spark", server.argv(config), env=server.env(), restart=True,
                              before=lambda: server.prepare(config)))
        self.spark_url = config.url
        self.out.write(f"spark connect server on {config.url} (local[{config.cores}], "
                       f"driver memory {config.memory}, scratch in {config.local_dir})\n")

    def _make_private(self) -> None:
        """QA_VAR_DIR and its secrets for this user only (0700, files 0600), also when they
        were made before (or by hand) with wider modes."""
        try:
            self.var_dir.chmod(0o700)
            for name in PRIVATE_FILES:
                path = self.var_dir / name
                if path.exists() and path.stat().st_mode & 0o077:
                    path.chmod(0o600)
        except OSError as exc:
            raise CommandError(
                f"cannot make QA_VAR_DIR={self.var_dir} private to this user: {exc.strerror} "
                f"({exc.filename}); give the stack a directory of its own"
            ) from exc

    def _prepare(self) -> None:
        from django.db import connections

        call_command("migrate", interactive=False, verbosity=0)
        self._make_private()  # a database that migrate has just made
        call_command("collectstatic", interactive=False, verbosity=0)
        self._ensure_admin()
        self._ensure_sample()
        connections.close_all()  # the supervisor serves nothing: no DB connection held open

    def _ensure_sample(self) -> None:
        """The README walkthrough's data in QA_VAR_DIR/sample, written once (about 3 s)."""
        from core.sample import nycflights13

        sample = self.var_dir / "sample"
        if not nycflights13.is_complete(sample):
            # In a process of its own: pandas would stay in this one's memory (0.2 GB) for
            # as long as the stack runs.
            subprocess.run(command("sampledata", "nycflights13", "--out", str(sample)),
                           env=self._child_env(), check=True, stdout=subprocess.DEVNULL)
            self.out.write(f"sample data (nycflights13) written to {sample}\n")

    def _ensure_admin(self) -> None:
        from django.contrib.auth import get_user_model

        from core.ops import audit

        user_model = get_user_model()
        wanted = settings.QA_ADMIN_PASSWORD
        user = user_model.objects.filter(username=ADMIN_USERNAME).first()
        stored = self.var_dir / "admin_password"
        if user is None:
            password = wanted or secrets.token_urlsafe(12)
            user_model.objects.create_superuser(ADMIN_USERNAME, "", password)
            audit.record(audit.os_actor(), "user-add", "", count=1, acted=1,
                         target=f"user {ADMIN_USERNAME!r}, superuser (runstack's first start)")
            if wanted:
                self.out.write(f"created user {ADMIN_USERNAME} with QA_ADMIN_PASSWORD\n")
            else:
                stored.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(stored, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as f:
                    f.write(password + "\n")
                self.out.write(
                    f"created user {ADMIN_USERNAME} with password {password} "
                    f"(kept in {stored})\n"
                )
        elif wanted and not user.check_password(wanted):
            user.set_password(wanted)
            user.save(update_fields=["password"])
            audit.record(audit.os_actor(), "user-change", "", count=1, acted=1,
                         target=f"user {ADMIN_USERNAME!r}: password set from QA_ADMIN_PASSWORD "
                                "(runstack)")
            self.out.write(f"set the password of {ADMIN_USERNAME} from QA_ADMIN_PASSWORD\n")
        elif not wanted and stored.exists():
            self.out.write(f"log in as {ADMIN_USERNAME}; its password is in {stored}\n")

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
        if settings.CODE_PATH:
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (settings.CODE_PATH, env.get("PYTHONPATH", "")) if p)
        return env

    def _announce(self) -> None:
        shown_host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        self.out.write(
            f"queueadmin is up: http://{shown_host}:{self.port}/ (queue on "
            f"{redacted(self.redis_url)}). Ctrl-C stops everything.\n"
        )
        self.out.flush()

    def _wait_listening(self) -> bool:
        """Wait until the web server accepts connections, so "up" means up; False if a stop
        was requested first."""
        connect_host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        connect_host = "::1" if connect_host == "::" else connect_host
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        while not self.stop_requested.is_set():
            self._poll()
            try:
                socket.create_connection((connect_host, self.port), timeout=0.5).close()
                return True
            except OSError:
                if time.monotonic() > deadline:
                    raise CommandError(
                        f"the web server did not listen on {self.host}:{self.port} within "
                        f"{LISTEN_TIMEOUT_S:g}s"
                    ) from None
                self.stop_requested.wait(0.05)
        return False

    def _supervise(self) -> None:
        while not self.stop_requested.wait(POLL_S):
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

    # -- stopping -------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_signal = signal.Signals(signum).name
        self.stop_requested.set()

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

    @staticmethod
    def _check_port_free(host: str, port: int, what: str, *, hint: str = "") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family) as s:
            # As the servers themselves do, so a port with only TIME_WAIT leftovers counts free.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                extra = f" ({hint})" if hint else ""
                raise CommandError(
                    f"cannot use {host}:{port} for {what}: {exc.strerror}{extra}. "
                    "Stop what uses it, or choose another port."
                ) from exc


def command(*args: str) -> list[str]:
    """The command line of `queueadmin <args>` in a child process: this interpreter running the
    package (`-m queueadmin`), from a checkout or a wheel alike; -P keeps the working directory
    off its import path, so that a `core` package there cannot stand in for the project's."""
    return [sys.executable, "-P", "-m", "queueadmin", *args]


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


def run_stack(
    *, host: str | None = None, port: int | None = None, out: Any = None, workers: int = 2,
    slots: int = WORKER_SLOTS,
) -> None:
    """Run the stack in the foreground until Ctrl-C / SIGTERM (then return) or until a
    child dies (then raise CommandError)."""
    Stack(
        host=host or settings.WEB_HOST,
        port=port or int(settings.WEB_PORT),
        out=out or sys.stdout,
        workers=workers,
        slots=slots,
    ).run()

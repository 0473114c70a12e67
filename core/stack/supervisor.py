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

import signal
import socket
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TextIO

from django.conf import settings
from django.core.management.base import CommandError

from core.conf import redacted
from core.procs import set_from_signal
from core.stack.children import STOP_TIMEOUT_S, Child, ChildSpec, Supervision, command
from core.stack.lock import DataDirLock
from core.stack.make_parent import MakeParent
from core.stack.prepare import Preparation

if TYPE_CHECKING:
    from core.pipeline.server import ServerConfig
    from core.stack.commands import CommandServer

LISTEN_TIMEOUT_S = 30.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# What in QA_VAR_DIR is its user's only (the directory itself is 0700): the secret key, the
# admin's password, the SQLite database and the files SQLite keeps beside it.
# One worker process of four slots (threads) by default, not two of two: a worker that has run
# data jobs holds PySpark's Connect client, pandas and pyarrow (+140 MiB over its ~100 MiB), and
# its heartbeat process and resource tracker (50 MiB). With one gunicorn process and two
# malloc arenas a process (children.py), the stack idle 30 s after the data jobs of
# bench/bench_interactive.py went from 1,593 to 1,179 MiB RSS (load 5-9, 2026-11-28). The slots
# stay four (a data job's chunks run two at once on the embedded Spark's two cores, and other
# jobs' and tasks' on the rest); a killed worker's leases are reclaimed at once and it is
# started again.
WORKERS = 1
WORKER_SLOTS = 4
# The child that runs a first job on the embedded Spark (`warmspark`): until it exits the stack
# says "Spark warming", and so do the console and `datajob submit` (core.queue.spark_warming).
WARMUP = "spark-warmup"
# What QA_REDIS_FSYNC may say, and what each promises (also in the README).


class Stack(Preparation, Supervision):
    def __init__(self, *, host: str, port: int, out: TextIO, workers: int = WORKERS,
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
        self.spark_config: ServerConfig | None = None  # its settings, read by _check_ports
        self.children: list[Child] = []
        self.commands: CommandServer | None = None
        self.stop_requested = threading.Event()
        self.stop_signal: str | None = None
        self.lock: DataDirLock | None = None
        self.make_parent = MakeParent.find()

    # -- the steps ------------------------------------------------------------------------

    def run(self) -> None:
        """Start everything, supervise until a signal or a child's death, stop everything."""
        self.lock = self._refuse_or_lock()
        previous = {s: signal.signal(s, self._on_signal) for s in STOP_SIGNALS}
        try:
            self._make_private()
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
                self.commands = self._serve_commands()
                self._supervise()
        finally:
            if self.commands is not None:
                self.commands.close()  # a command typed now runs in a process of its own
                self.commands = None
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
                    # Threads (gthread): an API call waiting for a request (?wait=, up to
                    # QA_API_WAIT_MAX_S) holds one thread, not the process. One process of
                    # eight threads, not two of four: a console's pages are mostly waits on
                    # Redis and the database, and each process held 55-115 MiB (issue 39).
                    "--bind", bind, "--workers", "1", "--threads", "8",
                    "--graceful-timeout", "5",
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
            specs.append(ChildSpec(WARMUP, command("warmspark", "--url", self.spark_url),
                                   oneshot=True))
        # One process of three threads: the database's history of every queue in the registry
        # (requests, dead letters, counter samples for the console's charts), the console's
        # bulk actions (requeue, delete, cancel of a filter's snapshot, chunk by chunk: a web
        # request only records them), and the recurring schedules (any number of schedulers
        # may run: one on another machine only takes over the slots of one that died). As
        # three processes they held 88 MiB each, mostly Python, Django and redis-py.
        specs.append(ChildSpec("services", command("runservices"), restart=True))
        return specs

    def _serve_commands(self) -> CommandServer | None:
        """The operators' commands run by forks of this process (core/stack/commands.py),
        unless QA_COMMAND_SERVER=off or it cannot listen (said, and commands run as before)."""
        if not settings.COMMAND_SERVER:
            return None
        from core.stack.commands import CommandServer

        try:
            return CommandServer.open(self.var_dir)
        except OSError as exc:
            self.out.write(f"warning: commands are not served by the stack ({exc}); each runs "
                           "in a process of its own\n")
            return None

    def _announce(self) -> None:
        shown_host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        self.out.write(
            f"queueadmin is up: http://{shown_host}:{self.port}/ (queue on "
            f"{redacted(self.redis_url)}). Ctrl-C stops everything.\n"
        )
        if any(c.name == WARMUP and c.process.poll() is None for c in self.children):
            # The console and `datajob submit` say so too (core.queue.spark_warming).
            self.out.write("Spark warming: a data job queued now waits for Spark until "
                           "its first job is done, said below (it compiles what data jobs "
                           "run).\n")
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

    # -- stopping -------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stop_signal = signal.Signals(signum).name
        set_from_signal(self.stop_requested)(signum, frame)  # not .set(): see there


def run_stack(
    *, host: str | None = None, port: int | None = None, out: Any = None,
    workers: int = WORKERS, slots: int = WORKER_SLOTS,
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

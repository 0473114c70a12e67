"""What the stack does before its services start: refuse what would fail (fsync mode, ports
in use, a data directory another stack holds), start its own Redis and Spark, and prepare the
data directory, the database, the sample data and the admin user."""

from __future__ import annotations

import dataclasses
import os
import re
import secrets
import socket
import subprocess
import threading
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from core.cli import bad_input
from core.procs import pid_alive
from core.stack.children import Child, ChildSpec, command
from core.stack.lock import DataDirBusy, DataDirLock, lock_data_dir
from core.stack.redis_server import start_redis

if TYPE_CHECKING:
    from core.pipeline.server import ServerConfig


ADMIN_USERNAME = "admin"
PRIVATE_FILES = ("secret_key", "admin_password", "db.sqlite3", "db.sqlite3-journal",
                 "db.sqlite3-wal", "db.sqlite3-shm", "stack.lock")
# Task slots per worker. A data chunk's work is the Spark server's, not the worker's: with two
# slots each, two workers keep four chunks in Spark, whose fixed costs (planning, scheduling,
# committing) then overlap with the others' work on the cores.
FSYNC_CHOICES = {
    "always": "an acknowledged write survives a crash of redis-server or of the machine",
    "everysec": "a crash of redis-server or of the machine can lose up to about 1 s of "
    "acknowledged writes",
}


class Preparation:
    """The part of Stack (a mixin) that prepares what its services need."""

    children: list[Child]
    embedded_redis: bool
    embedded_spark: bool
    fsync: str
    host: str
    lock: DataDirLock | None
    out: TextIO
    port: int
    redis_url: str
    spark_config: ServerConfig | None
    spark_url: str | None
    var_dir: Path
    stop_requested: threading.Event

    if TYPE_CHECKING:
        def _spawn(self, spec: ChildSpec, replacing: Child | None = None) -> None: ...
        def _child_env(self) -> dict[str, str]: ...

    def _refuse_or_lock(self) -> DataDirLock:
        """Everything that refuses a start, before anything is started or written: a data
        directory that did not exist is made (with its lock) only once nothing refuses, so a
        refused start leaves none behind. An existing one is locked first: another stack
        there holds its ports too, and who it is says more than a port in use."""
        if self.embedded_redis and self.fsync not in FSYNC_CHOICES:
            raise bad_input(
                f"QA_REDIS_FSYNC must be 'always' (the default: {FSYNC_CHOICES['always']}) or "
                f"'everysec' (faster: {FSYNC_CHOICES['everysec']}), not {self.fsync!r}"
            )
        lock = self._lock_data_dir() if self.var_dir.exists() else None
        try:
            self._check_ports()
        except BaseException:
            if lock is not None:
                lock.close()
            raise
        return lock or self._lock_data_dir()

    def _check_ports(self) -> None:
        """Each port the stack will listen on is free, or a CommandError that names the
        setting that chooses it."""
        self._check_port_free(self.host, self.port, "the console", setting="PORT (or --port)")
        if self.embedded_redis:
            self._check_port_free(
                "127.0.0.1", int(settings.EMBEDDED_REDIS_PORT), "the embedded redis-server",
                setting="QA_REDIS_PORT",
                hint="another `make run` may be running, or a redis-server left over from one",
                after="the commands of another terminal then need the same QA_REDIS_PORT",
            )
        if self.embedded_spark:
            from core.pipeline import server
            from core.pipeline.spark_target import SparkConfError

            try:
                self.spark_config = server.settings_config(self.var_dir)
            except SparkConfError as exc:
                raise bad_input(str(exc)) from exc
            self._check_port_free(
                "127.0.0.1", self.spark_config.port, "the embedded Spark Connect server",
                setting="QA_SPARK_PORT", hint="another `make run` may be running",
            )

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
        port = int(settings.EMBEDDED_REDIS_PORT)  # found free by _check_ports
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

        assert self.spark_config is not None  # made, its port found free, by _check_ports
        config = self.spark_config
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
        str(settings.SECRET_KEY)  # made now, if it is to be kept in QA_VAR_DIR (it is lazy)
        self._make_private()  # a database that migrate has just made, the key
        call_command("collectstatic", interactive=False, verbosity=0)
        self._ensure_admin()
        self._ensure_sample()
        self._forget_stopped_workers()
        connections.close_all()  # the supervisor serves nothing: no DB connection held open

    def _forget_stopped_workers(self) -> None:
        """The workers of this host's earlier stacks that an operator stopped are listed as
        stopped on the console until the stack restarts: until now (their names carry the
        host and the stack's pid, see _spawn; this stack's get new ones). A Redis that does
        not answer: they stay listed (a week at most), no harm done."""
        from core.queue import Queue, QueueError
        from core.queue.prune import forget_stopped

        earlier = re.compile(rf"{re.escape(socket.gethostname())}-\d+-worker-\d+\.\d+")
        try:
            q = Queue.from_url(self.redis_url, "default", prefix=settings.QUEUE_PREFIX)
            try:
                forget_stopped(q, lambda name: earlier.fullmatch(name) is not None)
            finally:
                q.redis.close()
        except QueueError:
            pass

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

    @staticmethod
    def _check_port_free(host: str, port: int, what: str, *, setting: str, hint: str = "",
                         after: str = "") -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family) as s:
            # As the servers themselves do, so a port with only TIME_WAIT leftovers counts free.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError as exc:
                extra = f" ({hint})" if hint else ""
                then = f"; {after}" if after else ""
                raise CommandError(
                    f"cannot use {host}:{port} for {what}: {exc.strerror}{extra}. "
                    f"Stop what uses it, or choose another port with {setting}{then}."
                ) from exc

"""The workers' Spark sessions.

Spark Connect (the default): each task slot of a worker holds one session on the Connect
server (the stack's own, core.pipeline.server, or SPARK_REMOTE's), made at the slot's first
data task and kept: its temporary views are the slot's own, and the worker holds no JVM. Each
data job runs in a FAIR scheduler pool of its own (spark_query.job_pool), so that a small
job's chunk is not queued behind a big job's tasks inside Spark.

Classic (SPARK_MASTER set: local[N] or spark://host:7077): one SparkSession per worker process,
made before the worker takes its first task (never at import, never before the worker forks
its heartbeat child), with a session per task on it (newSession: views of its own). Its
footprint: UI off, driver bound to loopback (local mode), a spark.local.dir of its own under
QA_VAR_DIR/spark/<pid> emptied at start and removed at exit (a dead worker's is removed by the
next worker's start), Spark's own logging at ERROR, and the JVM in a session of its own, so
that a SIGTERM to the worker's process group reaches the worker, which finishes its chunk, and
not the JVM under it.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import sys
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.procs import listening, pid_alive

from .spark_target import (
    SparkTarget,
    base_conf,
    cores_of,
    embedded_url,
    parse_url,
    redacted,
    target_from_settings,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("queueadmin.pipeline")

_LOCK = threading.Lock()
_SLOT = threading.local()  # Spark Connect: the slot's own session (.session, .url)
_SESSION: SparkSession | None = None
_OWNED = False  # made here (stopped at exit), not handed in by use_session()
_LOCAL_DIR: Path | None = None


def _var_dir() -> Path:
    from django.conf import settings

    return Path(settings.VAR_DIR)


def build_session(
    target: SparkTarget, *, app: str, local_dir: Path | None = None, jar: Path | None = None
) -> SparkSession:
    """A new session for `target`. Classic Spark: the JVM is started here, in a session of
    its own (start_new_session), so signals sent to the worker's process group miss it; it
    still exits with this process (its stdin is a pipe from it)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway
    from pyspark.sql import SparkSession

    quiet_query_context_loggers()
    if target.remote:
        return SparkSession.builder.remote(target.remote).appName(app).getOrCreate()
    conf = SparkConf().setMaster(target.master)
    for key, value in base_conf(target, app=app, local_dir=local_dir, jar=jar).items():
        conf.set(key, value)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # the workers' own Python
    # A process started by one that used Spark Connect inherits PySpark's "this is a remote
    # client" markers, which make SparkContext refuse to start: settings chose classic.
    for client_only in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        os.environ.pop(client_only, None)
    gateway = launch_gateway(  # type: ignore[no-untyped-call]
        conf, popen_kwargs={"start_new_session": True})
    sc = SparkContext(conf=conf, gateway=gateway)
    sc.setLogLevel("ERROR")
    return SparkSession(sc)


def quiet_query_context_loggers() -> None:
    """PySpark logs every analysis error it raises, with the JVM's stack trace, as one line of
    JSON at ERROR (loggers SQLQueryContextLogger, DataFrameQueryContextLogger): the pipeline
    turns the same error into a message of its own (errors.explain), so those lines only bury
    it, in the CLI's output and in the workers' logs."""
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # an older PySpark: no such loggers
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).disabled = True


def get_session() -> SparkSession:
    """This process's session, made at the first call (settings say where it runs)."""
    global _SESSION, _OWNED, _LOCAL_DIR
    with _LOCK:
        if _SESSION is not None:
            return _SESSION
        target = target_from_settings()
        clean_dead_scratch(_var_dir())  # what killed workers' sessions left
        local_dir = _var_dir() / "spark" / str(os.getpid())
        shutil.rmtree(local_dir, ignore_errors=True)  # a previous process's leftovers
        local_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        from . import jvm

        try:
            jar: Path | None = jvm.ensure_jar(_var_dir() / "spark" / "jars")
        except jvm.JarBuildError as exc:
            jar = None
            log.warning("%s; chunks inside a file are read as the file filtered to its rows",
                        exc)
        _SESSION = build_session(target, app=f"queueadmin-worker-{os.getpid()}",
                                 local_dir=local_dir, jar=jar)
        _OWNED, _LOCAL_DIR = True, local_dir
        atexit.register(stop_session)
        log.info("spark session ready master=%s version=%s in %.1fs", target.description,
                 _SESSION.version, time.monotonic() - started)
        return _SESSION


def connect_session(url: str) -> SparkSession:
    """This slot's (thread's) session on the Spark Connect server at `url`, made at its first
    use and kept: one per slot, so slots never see each other's temporary views."""
    from pyspark.sql import SparkSession

    session: SparkSession | None = getattr(_SLOT, "session", None)
    if session is not None and getattr(_SLOT, "url", None) == url:
        _make_active(session)
        return session

    quiet_query_context_loggers()
    started = time.monotonic()
    session = SparkSession.builder.remote(url).create()
    # PySpark retries an unreachable server for ten minutes, holding the task all that time;
    # a worker gives the task back after a few seconds instead and waits for the server.
    from pyspark.sql.connect.client.retries import DefaultPolicy

    session.client.set_retry_policies([DefaultPolicy(max_retries=5, max_backoff=2000)])
    # Spark's ${...} substitution would read the server's configuration and environment into
    # a job's SQL text (sqlcheck refuses ${ too: two locks on one door).
    session.conf.set("spark.sql.variable.substitute", "false")
    _SLOT.session, _SLOT.url = session, url
    _make_active(session)
    log.info("spark connect session ready url=%s version=%s in %.1fs", redacted(url),
             session.version, time.monotonic() - started)
    return session


def _make_active(session: SparkSession) -> None:
    """The thread's active session, which PySpark's udf() and friends look up: after a new
    session replaced one whose server went away, it must be the new one (PySpark sets it only
    when none is set, and has no public call for this on Spark Connect)."""
    active: Any = type(session)
    active._active_session.session = session


def forget_slot_session() -> None:
    """Drop this slot's Connect session (its server went away, or it was restarted): the
    next task makes a new one. Not stopped: its server is gone or no longer knows it, and
    releasing it would wait for retries."""
    session = getattr(_SLOT, "session", None)
    _SLOT.session = _SLOT.url = None
    if session is not None:
        with contextlib.suppress(Exception):
            session.client.close()


def session_for_task(target: SparkTarget | None = None) -> SparkSession:
    """The session a task runs in: the slot's Connect session, or (classic) a new session on
    this process's SparkSession, with temporary views of its own."""
    target = target or target_from_settings()
    if target.remote:
        return connect_session(target.remote)
    return task_session(get_session())


def not_ready(target: SparkTarget | None = None) -> str | None:
    """None when a data task can run now: the Connect server answers, or (classic) this
    process's session is up, started here if need be; else what is awaited."""
    target = target or target_from_settings()
    if target.remote:
        host, port = parse_url(target.remote)
        if listening(host, port):
            return None
        hint = ("the stack's own, which `make run` starts; or set SPARK_REMOTE or SPARK_MASTER"
                if target.remote == embedded_url() else "SPARK_REMOTE")
        return f"the Spark Connect server at {redacted(target.remote)} does not answer ({hint})"
    try:
        get_session()
    except Exception as exc:
        return f"Spark ({target.master}) does not start: {type(exc).__name__}: {str(exc)[:200]}"
    return None


def connect_failure(exc: BaseException) -> bool:
    """Whether `exc` says the Spark Connect server is unreachable, or no longer knows this
    client's session (it was restarted): the task can run once it answers again."""
    name = type(exc).__name__
    text = str(exc)
    if name in ("SparkConnectGrpcException", "RetriesExceeded", "_MultiThreadedRendezvous",
                "_InactiveRpcError") and any(
            s in text for s in ("UNAVAILABLE", "Connection refused", "failed to connect",
                                "Socket closed", "Connection reset", "DEADLINE_EXCEEDED")):
        return True
    return any(s in text for s in ("INVALID_HANDLE.SESSION_NOT_FOUND", "SESSION_CHANGED",
                                   "INVALID_HANDLE.SESSION_CLOSED"))


def clean_dead_scratch(var_dir: Path) -> list[Path]:
    """Remove the spark.local.dir of classic worker processes that are gone (killed: nothing
    stopped their session); returns what was removed."""
    removed = []
    root = var_dir / "spark"
    for d in root.iterdir() if root.is_dir() else []:
        if d.name.isdigit() and not pid_alive(int(d.name)):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def use_session(session: SparkSession | None) -> None:
    """Make `session` this process's session (tests share one); None forgets it."""
    global _SESSION, _OWNED
    with _LOCK:
        _SESSION, _OWNED = session, False


def stop_session() -> None:
    """Stop the session made by get_session() and remove its spark.local.dir."""
    global _SESSION, _OWNED, _LOCAL_DIR
    with _LOCK:
        session, owned, local_dir = _SESSION, _OWNED, _LOCAL_DIR
        _SESSION, _OWNED, _LOCAL_DIR = None, False, None
    if session is not None and owned:
        with contextlib.suppress(Exception):  # a JVM already gone cannot be stopped
            session.stop()
    if local_dir is not None:
        shutil.rmtree(local_dir, ignore_errors=True)


def forget_dead_session() -> None:
    """The JVM died: drop the session without asking it anything."""
    global _SESSION, _OWNED, _LOCAL_DIR
    with _LOCK:
        local_dir = _LOCAL_DIR
        _SESSION, _OWNED, _LOCAL_DIR = None, False, None
    if local_dir is not None:
        shutil.rmtree(local_dir, ignore_errors=True)


def master_of(session: SparkSession) -> str:
    """The master (or Connect URL) a session runs on, for the manifest."""
    try:
        return str(session.conf.get("spark.master"))
    except Exception:  # Spark Connect may not expose it
        return target_from_settings().description


_IDENTITY: weakref.WeakKeyDictionary[Any, tuple[str, str]] = weakref.WeakKeyDictionary()


def identity(session: SparkSession) -> tuple[str, str]:
    """The session's Spark version and master, for a manifest: asked once per session (each is
    a round trip on Spark Connect, and a slot's session serves job after job)."""
    if session not in _IDENTITY:
        _IDENTITY[session] = (session.version, master_of(session))
    return _IDENTITY[session]


def task_session(session: SparkSession) -> SparkSession:
    """A session for one task on a classic SparkSession: its own temporary views (`chunk`,
    `parts`, the job's views) and SQL settings, on the shared SparkContext, so concurrent
    slots never see each other's views."""
    if is_connect(session):  # a test's own Connect session: already the slot's own
        return session
    return session.newSession()


def is_connect(session: SparkSession) -> bool:
    return type(session).__module__.startswith("pyspark.sql.connect")


_CORES: dict[str, int | None] = {}


def local_cores(session: SparkSession, target: SparkTarget) -> int | None:
    """The cores of a Spark in local mode on this machine, which the chunks running at once
    share (the stack's own Connect server, a Connect server at a loopback address, a local
    master); None for a cluster, whose cores this process does not know. Asked once per
    process and target (on Spark Connect, the server's spark.master is a round trip)."""
    if target.description not in _CORES:
        master = master_of(session) if target.remote else target.master
        here = not target.remote or parse_url(target.remote)[0] in ("127.0.0.1", "localhost",
                                                                    "::1")
        _CORES[target.description] = cores_of(master, here=here)
    return _CORES[target.description]

"""The workers' Spark sessions.

Spark Connect (the default): each task slot of a worker holds one session on the Connect
server (the stack's own, core.pipeline.server, or SPARK_REMOTE's), made at the slot's first
data task and kept: its temporary views are the slot's own, and the worker holds no JVM. Each
data job runs in a FAIR scheduler pool of its own (job_pool), so that a small job's chunk is
not queued behind a big job's tasks inside Spark.

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
import hashlib
import logging
import os
import re
import shutil
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from core.stack.redis_server import pid_alive

from .errors import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("queueadmin.pipeline")

_LOCK = threading.Lock()
_SLOT = threading.local()  # Spark Connect: the slot's own session (.session, .url)
_SESSION: SparkSession | None = None
_OWNED = False  # made here (stopped at exit), not handed in by use_session()
_LOCAL_DIR: Path | None = None
_NO_CONNECT_SQL = False  # this PySpark's Connect plan classes differ: sql_over() uses views
LOG4J = Path(__file__).with_name("log4j2.properties")
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
QUICK_JIT = "-XX:TieredStopAtLevel=1"


class SparkConfError(PipelineError, ValueError):
    """SPARK_CONF is not a list of spark.* settings."""


@dataclass(frozen=True)
class SparkTarget:
    """Where the sessions of this process run: a Spark Connect URL (remote), else a master URL
    for classic sessions. `expected`: Spark was configured for this process (SPARK_REMOTE or
    SPARK_MASTER given, as the stack gives its workers), so a worker waits for it before its
    first task."""

    master: str = "local[*]"
    remote: str = ""
    expected: bool = True
    shuffle_partitions: int = 0  # 0: default_shuffle_partitions(master)
    ui: bool = False
    conf: tuple[tuple[str, str], ...] = ()  # more settings (SPARK_CONF), over the defaults

    @property
    def description(self) -> str:
        return self.remote or self.master

    def quick_start(self) -> SparkTarget:
        """This target for a session that only analyses SQL and reads schemas (the CLI's
        checks): the JVM compiles with C1 alone, which started it in 4.7 s instead of 7.3 s
        and made each small job a fifth faster, at the cost of a third more time per row on
        large data (10M rows: 1.1-1.9 s against 0.75 s), which a check never reads."""
        return replace(self, conf=((*self.conf, (JAVA_OPTIONS, QUICK_JIT))))


def target_from_settings() -> SparkTarget:
    """SPARK_REMOTE / SPARK_MASTER / SPARK_SHUFFLE_PARTITIONS / SPARK_UI / SPARK_CONF from
    Django settings, read when the first session is made: SPARK_REMOTE, else SPARK_MASTER,
    else the stack's own Connect server (QA_SPARK_PORT). SparkConfError for a SPARK_CONF that
    is not a list of spark.* settings."""
    from django.conf import settings

    master = getattr(settings, "SPARK_MASTER", "")
    remote = getattr(settings, "SPARK_REMOTE", "")
    return SparkTarget(
        master=master or "local[*]",
        remote=remote or ("" if master else embedded_url()),
        expected=bool(remote or master),
        shuffle_partitions=int(getattr(settings, "SPARK_SHUFFLE_PARTITIONS", 0)),
        ui=bool(getattr(settings, "SPARK_UI", False)),
        conf=parse_conf(getattr(settings, "SPARK_CONF", "")),
    )


def parse_conf(text: str) -> tuple[tuple[str, str], ...]:
    """SPARK_CONF's `key=value` entries, one per line or separated by `;` (a value may hold
    spaces: `spark.driver.extraJavaOptions=-XX:+UseG1GC -Xss4m`)."""
    out = []
    for raw in re.split(r"[;\n]", text):
        entry = raw.strip()
        if not entry:
            continue
        key, eq, value = entry.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key.startswith("spark.") or not value or " " in key:
            raise SparkConfError(
                f"SPARK_CONF: {entry!r} is not a Spark setting: give key=value entries whose "
                "keys start with spark., separated by ';' or new lines "
                "(e.g. spark.driver.memory=8g;spark.executor.memory=4g)")
        out.append((key, value))
    return tuple(out)


def embedded_url() -> str:
    """The stack's own Spark Connect server (core.pipeline.server)."""
    from django.conf import settings

    return f"sc://127.0.0.1:{int(settings.SPARK_CONNECT_PORT)}"


def job_pool(job_id: str) -> str:
    """The FAIR scheduler pool of a data job's Spark jobs. Spark never forgets a pool and
    sorts them all at every scheduling round, so jobs share 1,024 pools by a hash of their id
    (two running jobs meet in one pool, and queue there in order, once in 1,024)."""
    n = int.from_bytes(hashlib.blake2b(job_id.encode(), digest_size=4).digest(), "big") % 1024
    return f"queueadmin-{n:04d}"


def default_shuffle_partitions(master: str) -> int:
    """As many shuffle partitions as local[N] has threads (local[*]: the machine's cores),
    else 8. A chunk's aggregation is small: with 8 partitions on 2 cores a chunk of the
    benchmark's job took 0.50 s, with 2 0.29 s (bench_pipeline.py, 1.35M rows)."""
    return cores_of(master, here=True) or 8


_CORES: dict[str, int | None] = {}


def local_cores(session: SparkSession, target: SparkTarget) -> int | None:
    """The cores of a Spark in local mode on this machine, which the chunks running at once
    share (the stack's own Connect server, a Connect server at a loopback address, a local
    master); None for a cluster, whose cores this process does not know. Asked once per
    process and target (on Spark Connect, the server's spark.master is a round trip)."""
    if target.description not in _CORES:
        from .server import parse_url

        master = master_of(session) if target.remote else target.master
        here = not target.remote or parse_url(target.remote)[0] in ("127.0.0.1", "localhost",
                                                                      "::1")
        _CORES[target.description] = cores_of(master, here=here)
    return _CORES[target.description]


def cores_of(master: str, *, here: bool) -> int | None:
    """local[N] -> N; local -> 1 (Spark's one worker thread); local[*] -> this machine's cores
    when it runs `here`; else None."""
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if m is None:
        return None
    if m.group(1) is None:
        return 1
    if m.group(1) != "*":
        return max(1, int(m.group(1)))
    return (os.cpu_count() or 1) if here else None


def chunk_partitions(cores: int | None, at_once: int) -> int | None:
    """How many Spark partitions a chunk is read in when `at_once` chunks share `cores`: the
    cores over the chunks (one each when there are as many chunks as cores), so that the chunks
    running together keep every core busy with as few tasks as that takes. Measured on 2 cores,
    two chunks at once, each read in one partition against Spark's ~64-128 MB ones: 161.7M rows
    in 5.1-5.4 s against 5.9-6.3 s, as fast as one plain job over the whole input. None (Spark's
    own partitioning) when the cores are not known."""
    if cores is None:
        return None
    return max(1, -(-cores // max(1, at_once)))


MIN_PARTITIONS = "spark.sql.files.minPartitionNum"
MAX_PARTITION_BYTES = "spark.sql.files.maxPartitionBytes"


@dataclass
class _Settled:
    now: dict[str, str | None] = field(default_factory=dict)  # as settle() last left them
    before: dict[str, str | None] = field(default_factory=dict)  # before it first changed them


_SETTLED: weakref.WeakKeyDictionary[Any, _Settled] = weakref.WeakKeyDictionary()


def file_partitions(session: SparkSession, n: int | None) -> None:
    """Spark's file reader of `session` cuts what a query reads into about `n` partitions from
    now on (as many bytes each); None: the session's own settings again."""
    if n is None:
        settle(session, {MIN_PARTITIONS: None, MAX_PARTITION_BYTES: None})
    else:  # bytes per partition = the read's bytes / n (FilePartition.maxSplitBytes)
        settle(session, {MIN_PARTITIONS: str(n), MAX_PARTITION_BYTES: str(1 << 40)})


SHUFFLE_PARTITIONS = "spark.sql.shuffle.partitions"
POOL = "spark.scheduler.pool"


def shuffle_into(session: SparkSession, n: int | None) -> None:
    """`session`'s queries shuffle into `n` partitions from now on; None: its own setting
    again. A chunk read in one partition aggregates in one task too (its share of the cores):
    eight chunks of the benchmark's 40M rows, two at a time from a script on the stack's
    server, took 3.00 s against 3.17 s with the server's two (medians of 8 rounds)."""
    settle(session, {SHUFFLE_PARTITIONS: None if n is None else str(n)})


ADAPTIVE = "spark.sql.adaptive.enabled"


def adaptive(session: SparkSession, on: bool) -> None:
    """Adaptive query execution for `session`'s queries from now on: its own setting (on), or
    off. Off, a query with one shuffle runs as one Spark job of two stages, with no planning
    between them; AQE runs the shuffle's stage as a job of its own and plans the rest after
    it. For a chunk whose shuffle partitions are already its share of the cores and which reads
    no other table, that is all AQE would do: eight chunks of the benchmark's 40M rows through
    the stack took 2.40 s with it off against 2.54 s on (10 rounds alternating, plain job
    1.79 s)."""
    settle(session, {ADAPTIVE: None if on else "false"})


def settle(session: SparkSession, wanted: dict[str, str | None]) -> None:
    """Give `session` these SQL settings (None: the value it had before settle() first changed
    it). Only what differs from the last call is sent: on Spark Connect each setting is a round
    trip, and a slot's session runs chunk after chunk with the same ones."""
    state = _SETTLED.setdefault(session, _Settled())
    for key, value in wanted.items():
        if key not in state.before:
            if value is None:
                continue  # never changed here: it is the session's own
            state.before[key] = state.now[key] = session.conf.get(key, None)
        target = state.before[key] if value is None else value
        if state.now[key] == target:
            continue
        if target is None:
            session.conf.unset(key)
        else:
            session.conf.set(key, target)
        state.now[key] = target


def _var_dir() -> Path:
    from django.conf import settings

    return Path(settings.VAR_DIR)


def base_conf(target: SparkTarget, *, app: str, local_dir: Path | None,
              jar: Path | None = None) -> dict[str, str]:
    """The configuration every session of the project gets (workers, the CLI's check, tests)."""
    conf = {
        "spark.app.name": app,
        "spark.ui.enabled": "true" if target.ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(target.shuffle_partitions
                                            or default_shuffle_partitions(target.master)),
        "spark.sql.session.timeZone": "UTC",
        # The pipeline writes its own _SUCCESS, once the whole job's output is in place.
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.hadoop.parquet.enable.summary-metadata": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J}",
    }
    if target.master.startswith("local"):
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.driver.host"] = "127.0.0.1"
    if local_dir is not None:
        conf["spark.local.dir"] = str(local_dir)
    if jar is not None:  # the project's reader (core.pipeline.jvm)
        conf["spark.jars"] = str(jar)
    conf["spark.sql.variable.substitute"] = "false"  # ${...} would read the configuration
    for key, value in target.conf:  # SPARK_CONF wins, but the driver keeps its quiet logging
        conf[key] = f"{conf[JAVA_OPTIONS]} {value}" if key == JAVA_OPTIONS else value
    return conf


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
    log.info("spark connect session ready url=%s version=%s in %.1fs", _redacted(url),
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
        from .server import listening, parse_url

        host, port = parse_url(target.remote)
        if listening(host, port):
            return None
        hint = ("the stack's own, which `make run` starts; or set SPARK_REMOTE or SPARK_MASTER"
                if target.remote == embedded_url() else "SPARK_REMOTE")
        return f"the Spark Connect server at {_redacted(target.remote)} does not answer ({hint})"
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


def _redacted(url: str) -> str:
    """A Connect URL without its token (sc://host:port/;token=...)."""
    return re.sub(r"(token=)[^;]*", r"\1***", url)


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


def task_session(session: SparkSession) -> SparkSession:
    """A session for one task on a classic SparkSession: its own temporary views (`chunk`,
    `parts`, the job's views) and SQL settings, on the shared SparkContext, so concurrent
    slots never see each other's views."""
    if is_connect(session):  # a test's own Connect session: already the slot's own
        return session
    return session.newSession()


def is_connect(session: SparkSession) -> bool:
    return type(session).__module__.startswith("pyspark.sql.connect")


class NotArrow(PipelineError):
    """A result that cannot come back over Arrow: more than the server sends
    (spark.driver.maxResultSize), or what Arrow cannot carry as Spark gives it (a struct with
    a field name twice). Its rows must come another way (Spark's write)."""


def fetch_arrow(df: DataFrame) -> tuple[Any, Any]:
    """`df`'s rows as an Arrow table, as toArrow() gives them, and its Spark schema, in one
    round trip on Spark Connect: PySpark's toArrow() first asks the server for the schema (an
    analysis of the whole plan, a round trip of its own), then runs the plan, whose reply
    carries the schema anyway. Classic Spark, or a PySpark without that call: toArrow().
    NotArrow: the result cannot come this way (toArrow() would fail the same way)."""
    to_table = getattr(df, "_to_table", None) if is_connect(df.sparkSession) else None
    try:
        if to_table is None:
            return df.toArrow(), df.schema
        table, schema = to_table()
    except Exception as exc:
        if "maxResultSize" in str(exc):  # the server refused to send that much
            raise NotArrow(str(exc)) from exc
        raise
    from pyspark.sql.pandas.types import to_arrow_schema

    if schema is None:  # not sent by this server: asked for, as toArrow() does
        schema = df.schema
    try:  # toArrow()'s own conversion: Spark's types and names, timestamps in UTC
        arrow = to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True,
                                timezone="UTC")
    except Exception as exc:  # e.g. PySpark's UnsupportedOperationException
        raise NotArrow(str(exc)) from exc
    return table.cast(arrow), schema


def sql_over(session: SparkSession, text: str, views: dict[str, DataFrame]) -> DataFrame:
    """The query `text` over `views` (name -> frame). On Spark Connect, one plan that carries
    its views (PySpark's own plan for spark.sql() with DataFrame arguments), sent only with
    the query that runs it: a temporary view and spark.sql() are a round trip each there, each
    analysing the query once more. Eight chunks of the benchmark's 40M rows, two at a time from
    a script on the stack's server, took 2.99 s against 3.23 s (medians of 8 rounds, plain
    job 2.37 s). Classic Spark, or a PySpark without that plan: temporary views of the task's
    own session."""
    if is_connect(session):
        plan = _connect_sql(session, text, views)
        if plan is not None:
            return plan
    for name, frame in views.items():
        frame.createOrReplaceTempView(name)
    return session.sql(text)


def _connect_sql(session: SparkSession, text: str, views: dict[str, DataFrame]
                 ) -> DataFrame | None:
    """A Spark Connect DataFrame of `text` with `views` as its relations (PySpark's internal
    plan classes, pinned by pyproject's pyspark<5; None if they changed shape)."""
    global _NO_CONNECT_SQL
    if _NO_CONNECT_SQL:
        return None
    try:
        from pyspark.sql.connect.dataframe import DataFrame as ConnectFrame
        from pyspark.sql.connect.plan import SQL, SubqueryAlias

        relations = [SubqueryAlias(cast(Any, frame)._plan, name)
                     for name, frame in views.items()]
        return ConnectFrame(SQL(text, None, None, relations), session)  # type: ignore[arg-type]
    except (ImportError, TypeError, AttributeError) as exc:
        _NO_CONNECT_SQL = True
        log.warning("spark connect: no SQL plan with relations in this PySpark (%s); "
                    "using temporary views", exc)
        return None


@contextlib.contextmanager
def cancellable(session: SparkSession, tag: str, should_stop: Any, *,
                pool: str | None = None) -> Iterator[None]:
    """Run the block's Spark jobs in the job group `tag` (classic Spark; an operation tag on
    Spark Connect); while it runs, a watcher thread asks `should_stop()` every 0.2 s and
    cancels the group when it says so (the task's request was cancelled, or its lease was
    lost). A job group, not a job tag, on classic Spark: SQL executions there do not carry
    the thread's job tags (measured on 4.3: cancelJobsWithTag left the job running)."""
    connect = is_connect(session)
    if pool is not None:  # SQL settings starting with spark. reach the jobs' local properties
        settle(session, {POOL: pool})  # a slot's next chunk of the same job: no round trip
    if connect:
        session.addTag(tag)
    else:
        session.sparkContext.setJobGroup(tag, f"queueadmin task {tag}", interruptOnCancel=True)
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            if should_stop():
                with contextlib.suppress(Exception):
                    if connect:
                        session.interruptTag(tag)
                    else:
                        session.sparkContext.cancelJobGroup(tag)
                return

    watcher = threading.Thread(target=watch, name=f"spark-cancel-{tag}", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join(1)
        with contextlib.suppress(Exception):
            if connect:
                session.removeTag(tag)
            else:
                sc = session.sparkContext
                for prop in ("spark.jobGroup.id", "spark.job.description",
                             "spark.job.interruptOnCancel"):
                    sc.setLocalProperty(prop, None)  # type: ignore[arg-type]


def scan_columns(df: Any, path: str) -> list[str] | None:
    """The columns that computing `df` reads from the files of `path` (Spark's column
    pruning, from its physical plan), in the files' order; None when the plan cannot be
    asked (Spark Connect) or does not scan `path`."""
    try:
        plan = df._jdf.queryExecution().sparkPlan()
    except Exception:  # Spark Connect: no JVM objects on this side
        return None
    wanted = _plain_path(str(Path(path).resolve()))
    found: list[str] | None = None
    try:
        leaves = plan.collectLeaves()
        for i in range(leaves.size()):
            leaf = leaves.apply(i)
            if leaf.getClass().getSimpleName() != "FileSourceScanExec":
                continue
            roots = str(leaf.relation().location().rootPaths().mkString("\n")).split("\n")
            if wanted not in (_plain_path(r) for r in roots):
                continue
            names = [str(n) for n in leaf.requiredSchema().fieldNames()]
            found = (found or []) + [n for n in names if n not in (found or [])]
    except Exception:
        return None
    return found


def _plain_path(uri: str) -> str:
    """`file:/a/b`, `file:///a/b/` and `/a/b` alike as `/a/b`."""
    rest = uri[len("file:"):] if uri.startswith("file:") else uri
    return "/" + rest.strip("/")

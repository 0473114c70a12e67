"""Fixtures of more than one folder of tests: a redis-server the suite starts itself, a fresh key
prefix per test, a clock the test controls; the Django side (django_queue, the console's queue,
logged-in Clients by role, a queue with dead letters and leases); worker processes; the run's
Spark Connect server; a Redis Cluster. A fixture of one folder lives in that folder's
conftest.py; helpers that are not fixtures live in the tests/*_support.py modules. No test
imports a fixture by name."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from core.queue import Queue
from core.stack.redis_server import RedisCluster, RedisServer, start_cluster, start_redis
from tests.xdist_support import ModuleGroups, record_groups, run_dir

if TYPE_CHECKING:
    from django.test import Client

    from tests.console_support import World

# Every Spark JVM of the run (the shared session, spawned workers, the CLI's checks) compiles
# with C1 alone: on the tests' small data it starts ~2.5 s sooner and runs each job faster
# (core.pipeline.spark_target.QUICK_JIT). Set before any process is spawned, so they all inherit it.
TEST_SPARK_CONF = "spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1"
os.environ.setdefault("SPARK_CONF", TEST_SPARK_CONF)


# The fixtures that start a Spark JVM (`connect_url` below, the clusters' in
# tests/pipeline/conftest.py): a test that uses one, even through another fixture, is marked
# `spark` and `slow` (two such tests had been left out of `slow`, so `make test-fast` started a
# JVM). The database tests' second pass, on PostgreSQL, leaves them out: their Spark side is the
# same on either database. A test that drives Chromium (tests/console/conftest.py's `browser`)
# is marked `browser` and `slow` the same way.
SPARK_FIXTURES = frozenset({"connect_url", "spark_standalone", "spark_connect"})
BROWSER_FIXTURES = frozenset({"browser"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if SPARK_FIXTURES & used:
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.slow)
        if BROWSER_FIXTURES & used:
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.slow)
    # The slow tests first, each group still in pytest-randomly's order (this hook runs after
    # its shuffle): the test processes (pytest-xdist, handed one test, or one module's tests
    # that share a module fixture, at a time from this list: tests/xdist_support.py) then end
    # on short tests, and neither waits long for the other to finish a test of tens of seconds
    # that the shuffle had put last.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    record_groups(config, items)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The controller's scheduler (tests/xdist_support.py), for the default distribution."""
    return ModuleGroups(config, log) if config.getvalue("dist") == "load" else None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--screenshots", action="store_true",
        help="browser tests save a screenshot of each page under var/screenshots/",
    )


@pytest.fixture(scope="session", autouse=True)
def data_roots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Data jobs of the run may read and write under its temporary folder (tmp_path), and
    nowhere else: the data roots' check stays on in every test, in-process and in spawned
    workers (the environment), as in production."""
    from django.conf import settings

    base = tmp_path_factory.getbasetemp()
    saved = settings.DATA_ROOTS, settings.OUTPUT_ROOTS
    settings.DATA_ROOTS = settings.OUTPUT_ROOTS = [str(base)]
    os.environ["QA_DATA_ROOTS"] = os.environ["QA_OUTPUT_ROOTS"] = str(base)
    yield base
    settings.DATA_ROOTS, settings.OUTPUT_ROOTS = saved


@pytest.fixture(scope="session", autouse=True)
def check_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """What data jobs' submit-time checks found is kept in the run's temporary folder (not in
    the checkout's var/), in-process and in the commands the tests start; it stays on, as in
    production."""
    from django.conf import settings

    folder = tmp_path_factory.getbasetemp() / "check-cache"
    saved = settings.CHECK_CACHE_DIR
    settings.CHECK_CACHE_DIR = folder
    os.environ["QA_CHECK_CACHE"] = str(folder)
    yield folder
    settings.CHECK_CACHE_DIR = saved
    os.environ.pop("QA_CHECK_CACHE", None)


@pytest.fixture(scope="session", autouse=True)
def spark_classes() -> Iterator[Path | None]:
    """The suite's Spark JVMs (its Connect servers, its stacks' servers, the workers' classic
    sessions) map the class archive `make test` made beside the virtualenv's PySpark (Makefile,
    CLASSES): each starts in about half the time. Without one (pytest run by hand before any
    `make test`), or with QA_SPARK_CLASSES set, they start as that says."""
    import sys

    from django.conf import settings

    archive = Path(sys.prefix) / "spark-classes.jsa"
    if "QA_SPARK_CLASSES" in os.environ or not archive.is_file():
        yield settings.SPARK_CLASS_ARCHIVE
        return
    saved = settings.SPARK_CLASS_ARCHIVE
    settings.SPARK_CLASS_ARCHIVE = archive
    os.environ["QA_SPARK_CLASSES"] = str(archive)  # the processes the tests start
    yield archive
    settings.SPARK_CLASS_ARCHIVE = saved
    os.environ.pop("QA_SPARK_CLASSES", None)


@pytest.fixture(scope="session", autouse=True)
def fast_password_hashing() -> Iterator[None]:
    """Passwords set in the test process are hashed with MD5, not PBKDF2's million rounds
    (0.25 s of CPU a password here, paid by every test that makes a user with one, such as
    the admin tests' superuser), as Django's testing docs advise: no test here is about the
    hash. Processes the tests start (stacks, commands) hash as in production."""
    from django.conf import settings
    from django.contrib.auth.hashers import reset_hashers

    saved = settings.PASSWORD_HASHERS
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    reset_hashers(setting="PASSWORD_HASHERS")  # the hashers loaded are cached
    yield
    settings.PASSWORD_HASHERS = saved
    reset_hashers(setting="PASSWORD_HASHERS")


class FakeClock:
    """Milliseconds that only move when a test says so (lease expiry, backoff)."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the whole session, on a free port, stopped by PID at the end."""
    server = start_redis(Path(tmp_path_factory.mktemp("redis")), appendonly=False)
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses, so tests never see each other's keys."""
    return "t" + uuid.uuid4().hex[:12]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(redis_client: redis.Redis, prefix: str, clock: FakeClock) -> Queue:
    """A queue on the suite's Redis with its own prefix and a test-controlled clock."""
    return Queue(redis_client, "q", prefix=prefix, clock=clock)


# -- Django side ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """On PostgreSQL (DATABASE_URL, as `make test` sets it from TEST_POSTGRES_URL), a test
    database named for this run, so that runs sharing a server never meet in "test_postgres"."""
    import os

    from django.conf import settings

    db = settings.DATABASES["default"]
    if "postgresql" in db["ENGINE"]:
        db.setdefault("TEST", {})["NAME"] = f"test_{db['NAME']}_{os.getpid()}"
    elif "sqlite" in db["ENGINE"]:
        # pytest-django names it "test_" + NAME (+ "_gw0"), which for our engine's absolute
        # path is a relative one: a test_/ tree in the working directory. Beside the real one.
        name = str(db.get("TEST", {}).get("NAME") or f"test_{db['NAME']}")
        if name.startswith("test_/"):
            path = Path(name.removeprefix("test_"))
            db.setdefault("TEST", {})["NAME"] = str(path.with_name(f"test_{path.name}"))


@pytest.fixture
def django_queue(settings: Any, redis_server: RedisServer, prefix: str) -> Queue:
    """Point Django (REDIS_URL, QUEUE_PREFIX) at the suite's Redis under this test's own prefix,
    and return the default queue as core.conf.get_queue() builds it (Redis server's clock)."""
    from core.conf import get_queue

    settings.REDIS_URL = redis_server.url
    settings.QUEUE_PREFIX = prefix
    return get_queue()


@pytest.fixture
def console(settings: Any, django_queue: Queue) -> Queue:
    """The default queue on the suite's Redis, with the console's cache off (every request
    reads Redis, so a test sees what it just wrote)."""
    settings.CONSOLE_CACHE_S = 0
    return django_queue


@pytest.fixture
def viewer(db: Any) -> Client:
    """A Client logged in as vera, in the viewer group: may read every page, act on nothing."""
    from tests.console_support import logged_in_client

    return logged_in_client("vera", "viewer")


@pytest.fixture
def operator(db: Any) -> Client:
    """A Client logged in as otto, in the operator group (core.ops.perms.GROUPS)."""
    from tests.console_support import logged_in_client

    return logged_in_client("otto", "operator")


@pytest.fixture
def world(console: Queue, db: Any) -> World:
    """The console's queue with a failed request of three dead letters (in Redis, and mirrored
    into the database) and an active one whose tasks 0 and 1 are leased to a live worker
    (w-live) and a stale one (w-stale)."""
    from core.models import DeadLetter
    from tests.console_support import World, fail_tasks
    from tests.mirror_support import mirror

    q = console
    failed = q.submit([{"row": i} for i in range(3)], handler="echo", request_id="bad-1",
                      max_attempts=1, tenant="acme").request_id
    fail_tasks(q, failed, 3)
    now = q.now_ms()
    q.heartbeat("w-live", {"host": "h", "pid": 1, "dead_after_ms": 60_000, "queues": ["default"]})
    running = q.submit([{"n": i} for i in range(4)], handler="echo", request_id="run-1",
                       concurrency=4).request_id
    [live] = q.dequeue("w-live", 1)
    [stale] = q.dequeue("w-stale", 1)
    # w-stale last beat 8 s ago with a dead-after of 10 s: stale, not gone.
    q.heartbeat("w-stale", {"host": "h", "pid": 2, "dead_after_ms": 10_000,
                            "queues": ["default"],
                            "tasks": [{"queue": "default", "request": running,
                                       "task": stale.task_id, "since": now}]})
    q.redis.zadd(q.keys.workers, {"w-stale": now - 8_000})
    mirror(q)
    letters = list(DeadLetter.objects.filter(queue="default", request_id=failed)
                   .order_by("entry_id"))
    assert len(letters) == 3
    return World(q, failed, [d.entry_id for d in letters], letters[0].fingerprint, running,
                 live.task_id, stale.task_id)


def keys_under(client: redis.Redis, prefix: str) -> list[str]:
    """Every key of one test's prefix (a test-only scan of the suite's own server)."""
    return sorted(client.scan_iter(match=f"{prefix}:*", count=1000))


# -- worker tests --------------------------------------------------------------------------


@pytest.fixture
def live_queue(redis_client: redis.Redis, prefix: str) -> Queue:
    """A queue on the suite's Redis under this test's prefix, on the Redis server's clock (real
    time, as worker processes see it): for tests where leases must really expire."""
    return Queue(redis_client, "q", prefix=prefix)


@pytest.fixture
def spawn_worker(tmp_path: Path, prefix: str, redis_server: RedisServer) -> Iterator[Any]:
    """A factory starting `manage.py runworker` processes on queue "q" under this test's
    prefix, with tests.handlers imported and --dead-after 2 (later options override):
    spawn_worker(name, *options, url=...) -> Popen; its log is tmp_path/<name>.log.
    At teardown every process still running is killed by its pid and reaped."""
    import os
    import subprocess
    import sys

    procs: list[subprocess.Popen[bytes]] = []
    root = Path(__file__).resolve().parent.parent

    def spawn(name: str, *options: str, url: str | None = None) -> subprocess.Popen[bytes]:
        env = os.environ | {
            "REDIS_URL": url or redis_server.url, "QUEUE_PREFIX": prefix,
            "DJANGO_SETTINGS_MODULE": "queueadmin.settings", "SECRET_KEY": "worker-tests",
            "QA_VAR_DIR": str(tmp_path / "var"),
        }
        args = [sys.executable, "manage.py", "runworker", "--queue", "q", "--import",
                "tests.handlers", "--dead-after", "2", "--name", name, *options]
        with open(tmp_path / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(args, cwd=root, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


@pytest.fixture
def wait_until() -> Any:
    """wait_until(condition, timeout, what): poll `condition` every 20 ms until it returns
    something truthy (returned), or fail the test naming `what` after `timeout` seconds."""
    import time

    def wait(condition: Any, timeout: float = 10.0, what: str = "the condition") -> Any:
        deadline = time.monotonic() + timeout
        while not (value := condition()):
            if time.monotonic() > deadline:
                pytest.fail(f"timed out after {timeout}s waiting for {what}")
            time.sleep(0.02)
        return value

    return wait


# -- Spark ---------------------------------------------------------------------------------

RESULT_LIMIT = "4m"  # the test server's spark.driver.maxResultSize


SERVER_RECORD = "spark-connect.json"  # in the run's folder: the shared server's url and pid


@pytest.fixture(scope="session")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The run's Spark Connect server, started as the stack starts its own (core.pipeline.server,
    with the project's reader jar; local[2], one shuffle partition) at the first test that asks
    (the pipeline's, and the browser tests of data jobs, whose stack runs its jobs there), and
    shared by the run's test processes: one JVM to start and warm instead of one per process
    (each cost 60-90 s of CPU over a run). The first process starts it under a file lock and
    records it; pytest_sessionfinish stops it once every process is done. SPARK_REMOTE points
    this process's tasks and the workers it spawns at it."""
    import fcntl
    import json

    from django.conf import settings

    shared = run_dir(tmp_path_factory)
    record = shared / SERVER_RECORD
    with open(shared / "spark-connect.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if record.exists():
            url = json.loads(record.read_text())["url"]
        else:
            url, pid = _start_connect_server(shared / "spark-connect")
            record.write_text(json.dumps({"url": url, "pid": pid}))
    saved = settings.SPARK_REMOTE, os.environ.get("SPARK_REMOTE")
    settings.SPARK_REMOTE = os.environ["SPARK_REMOTE"] = url
    yield url
    settings.SPARK_REMOTE = saved[0]
    if saved[1] is None:
        os.environ.pop("SPARK_REMOTE", None)
    else:
        os.environ["SPARK_REMOTE"] = saved[1]


def _start_connect_server(work: Path) -> tuple[str, int]:
    """Start the test server in `work`; its url and pid once it listens."""
    import subprocess

    from core.pipeline import classes, jvm, server
    from core.procs import free_port, wait_listening
    from tests.pipeline_support import TEST_JAVA_OPTIONS, jar_dir

    work.mkdir(parents=True, exist_ok=True)
    config = server.ServerConfig(
        port=free_port(), local_dir=work / "local", memory="1g",
        jar=jvm.ensure_jar(jar_dir()), cores="2", class_archive=classes.usable(),
        conf=(("spark.sql.shuffle.partitions", "1"),
              # small, so that a test can have a chunk's result refused (test_pipeline_reads)
              ("spark.driver.maxResultSize", RESULT_LIMIT),
              ("spark.driver.extraJavaOptions", TEST_JAVA_OPTIONS)))
    server.prepare(config)
    log = work / "server.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(server.argv(config), env=server.env(), cwd=work,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    if not wait_listening("127.0.0.1", config.port, timeout=180,
                          alive=lambda: proc.poll() is None):
        _stop_pid(proc.pid)
        raise RuntimeError(f"the test Spark Connect server did not start:\n"
                           f"{log.read_text(errors='replace')[-3000:]}")
    return config.url, proc.pid


def _stop_pid(pid: int) -> None:
    """Stop a server started in a session of its own: SIGTERM, then SIGKILL after 30 s."""
    import signal
    import time

    from core.procs import pid_alive

    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 30
    while pid_alive(pid) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):  # reaped here when this process started it
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """In every process: stop its Redis Cluster if it started one. In the controller (or the
    one process): stop the run's shared Spark Connect server, every test process being done
    with it."""
    import json

    _stop_cluster()
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist test process: the controller stops it
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    record = factory.getbasetemp() / SERVER_RECORD
    if record.exists():
        _stop_pid(json.loads(record.read_text())["pid"])
        record.unlink()


# -- Redis Cluster -------------------------------------------------------------------------


# A cluster's masters report cluster_state:ok no sooner than two seconds after they start (Redis'
# CLUSTER_WRITABLE_DELAY), whatever the joining costs. So a test process whose tests ask for the
# cluster starts it in the background as soon as its list is known, and the first test to ask
# waits only for what is left of the two seconds: no test process sits idle through them.
_cluster: concurrent.futures.Future[RedisCluster] | None = None


def pytest_collection_finish(session: pytest.Session) -> None:
    global _cluster
    if session.config.option.collectonly or _cluster is not None:
        return
    if any("redis_cluster" in getattr(item, "fixturenames", ()) for item in session.items):
        folder = Path(session.config._tmp_path_factory.mktemp("cluster"))  # type: ignore[attr-defined]
        _cluster = concurrent.futures.Future()

        def start(future: concurrent.futures.Future[RedisCluster]) -> None:
            try:
                future.set_result(start_cluster(folder))
            except BaseException as e:  # handed to the test that asks for it
                future.set_exception(e)

        threading.Thread(target=start, args=(_cluster,), name="cluster-start", daemon=True).start()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> RedisCluster:
    """One 3-shard Redis Cluster for the test process's cluster tests, started in the
    background from the moment its tests were collected (pytest_collection_finish) and stopped
    by PID when the process ends (_stop_cluster)."""
    global _cluster
    if _cluster is None:  # asked for by a fixture the collection did not see
        _cluster = concurrent.futures.Future()
        _cluster.set_result(start_cluster(Path(tmp_path_factory.mktemp("cluster"))))
    return _cluster.result(timeout=60)


def _stop_cluster() -> None:
    """The process's cluster, if it started one (asked for or not: a test process may have been
    handed none of the tests that would have used it)."""
    if _cluster is not None:
        with contextlib.suppress(Exception):
            _cluster.result(timeout=60).stop()


@dataclass(frozen=True)
class ClusterLayout:
    """Two queues of the suite's cluster on different shards, and a node holding neither."""

    url: str  # REDIS_URL of the node that owns none of the queues' slots
    queues: tuple[str, str]  # "default", then a queue on another shard
    owners: dict[str, str]  # queue -> URL of the node that owns its slot


@pytest.fixture(scope="session")
def cluster_layout(redis_cluster: RedisCluster) -> ClusterLayout:
    """Where queues live on the suite's cluster, from the slot table of its first node."""
    from redis.crc import key_slot

    host, port = redis_cluster.startup_nodes[0]
    with redis.Redis(host=host, port=port, decode_responses=True) as r:
        table = r.cluster("SLOTS")

    def owner(queue: str) -> str:
        slot = key_slot(queue.encode())  # every key of a queue carries the tag {queue}
        (node,) = [n for lo, hi, n, *_ in table if int(lo) <= slot <= int(hi)]
        return f"redis://{node[0]}:{node[1]}/0"

    home = owner("default")
    other = next(q for q in (f"q{i}" for i in range(100)) if owner(q) != home)
    owners = {"default": home, other: owner(other)}
    (bystander,) = {f"redis://{h}:{p}/0" for h, p in redis_cluster.startup_nodes} - {
        home, owners[other]
    }
    return ClusterLayout(bystander, ("default", other), owners)


@pytest.fixture
def spans() -> Iterator[Any]:
    """Tracing on for the test, its spans kept in memory: an InMemorySpanExporter (the SDK is
    imported here only: most of the suite never loads it)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from core import tracing

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.enable(provider)
    yield exporter
    tracing.disable()

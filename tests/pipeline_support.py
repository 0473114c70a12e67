"""Fixtures of the data pipeline tests: one Spark Connect server for the whole run of a test
process (started as the stack starts its own), small generated data, and a way to run a job to
its end with an in-process worker."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import redis

from core.pipeline import jobs, jvm, server, spark
from core.pipeline.check import make_spec
from core.pipeline.spec import JobSpec
from core.queue import Queue
from core.stack.redis_server import free_port
from core.worker import WorkerConfig
from core.worker.runtime import Worker

CARRIERS = ["AA", "B6", "DL", "UA", "WN"]


# The suite's Spark JVMs compile with C1 alone: on its small data they start sooner and run
# each job faster (core.pipeline.spark.QUICK_JIT).
TEST_JAVA_OPTIONS = spark.QUICK_JIT


def jar_dir() -> Path:
    """Where the suite keeps the project's Spark reader jar, built once for every run and test
    process (named by a hash of its sources and the PySpark version)."""
    return Path(tempfile.gettempdir()) / "queueadmin-test-jars"


@pytest.fixture(scope="session")
def connect_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The run's Spark Connect server, started as the stack starts its own (core.pipeline.server,
    with the project's reader jar; local[2], one shuffle partition), once per test process.
    SPARK_REMOTE points this process's tasks and the workers it spawns at it."""
    from django.conf import settings

    work = tmp_path_factory.mktemp("spark-connect")
    config = server.ServerConfig(
        port=free_port(), local_dir=work / "local", memory="1g",
        jar=jvm.ensure_jar(jar_dir()), cores="2",
        conf=(("spark.sql.shuffle.partitions", "1"),
              ("spark.driver.extraJavaOptions", TEST_JAVA_OPTIONS)))
    server.prepare(config)
    log = work / "server.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(server.argv(config), env=server.env(), cwd=work,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        if not server.wait_listening("127.0.0.1", config.port, timeout=180,
                                     alive=lambda: proc.poll() is None):
            raise RuntimeError(f"the test Spark Connect server did not start:\n"
                               f"{log.read_text(errors='replace')[-3000:]}")
        saved = settings.SPARK_REMOTE, os.environ.get("SPARK_REMOTE")
        settings.SPARK_REMOTE = os.environ["SPARK_REMOTE"] = config.url
        yield config.url
        settings.SPARK_REMOTE = saved[0]
        if saved[1] is None:
            os.environ.pop("SPARK_REMOTE", None)
        else:
            os.environ["SPARK_REMOTE"] = saved[1]
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="session")
def spark_session(connect_url: str) -> Iterator[Any]:
    """A Spark Connect session of the test itself on the run's server (to read outputs, make
    frames); tasks use sessions of their own on it, one per worker slot."""
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(connect_url).create()
    yield session
    with contextlib.suppress(Exception):
        session.stop()


@pytest.fixture
def dq(redis_client: redis.Redis, prefix: str) -> Queue:
    """A queue on the server's clock (workers renew leases in real time)."""
    return Queue(redis_client, "data", prefix=prefix)


def flights(n: int = 600, seed: int = 7) -> pd.DataFrame:
    """A small flights-like table: carrier, month, dep_delay (some missing), distance."""
    rng = np.random.default_rng(seed)
    delay = rng.normal(10, 30, n).round(1)
    delay[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame({
        "id": np.arange(n, dtype="int64"),
        "carrier": rng.choice(CARRIERS, n),
        "month": rng.integers(1, 13, n).astype("int64"),
        "dep_delay": delay,
        "distance": rng.integers(100, 3000, n).astype("int64"),
    })


@pytest.fixture
def flights_parquet(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    df = flights()
    path = tmp_path / "flights.parquet"
    df.to_parquet(path, index=False)
    return path, df


def spec_for(tmp_path: Path, input: Path, **kw: Any) -> JobSpec:
    defaults: dict[str, Any] = {"job_id": f"job{len(list(tmp_path.iterdir()))}",
                                "format": "parquet", "output": str(tmp_path / "out")}
    return make_spec(input=str(input), **{**defaults, **kw})


def run_worker(q: Queue, *, slots: int = 1) -> None:
    """An in-process worker that runs until nothing can run (burst)."""
    config = WorkerConfig(burst=True, heartbeat="thread", slots=slots, dead_after=10,
                          idle_wait=0.1, grace=5)
    import core.pipeline.tasks  # noqa: F401  (registers the datajob handler)

    Worker([q], config).run()


def run_job(q: Queue, spec: JobSpec, **options: Any) -> jobs.JobStatus:
    jobs.submit(q, spec, jobs.QueueOptions(**options))
    run_worker(q)
    return jobs.status(q, spec.job_id)

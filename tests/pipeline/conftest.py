"""The data pipeline's tests (core/pipeline): a session of the test's own on the run's Spark
Connect server (tests/conftest.py's `connect_url`, which the browser tests of data jobs use
too); a queue on the server's clock; small generated Parquet data; and the standalone-master
and Connect-server clusters of the cluster tests (their JVMs started by
tests/spark_cluster.py). Helpers that are not fixtures: tests/pipeline_support.py."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import redis

from core.pipeline import classes
from core.procs import free_port
from core.queue import Queue
from tests.pipeline_support import flights
from tests.spark_cluster import start_jvm, wait_for


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


@pytest.fixture
def flights_parquet(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    df = flights()
    path = tmp_path / "flights.parquet"
    df.to_parquet(path, index=False)
    return path, df


# -- the cluster tests' Spark (tests/spark_cluster.py starts its JVMs) ---------------------


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """spark://127.0.0.1:<port>, with one worker (1 core, 1 GB) registered."""
    work = tmp_path_factory.mktemp("spark-standalone")
    port = free_port()
    # The REST submission server (6066) and the web UIs are not needed: off or on free ports.
    opts = "-Dspark.master.rest.enabled=false -Dspark.ui.enabled=false"
    master = start_jvm("master", ["org.apache.spark.deploy.master.Master", "--host",
                                  "127.0.0.1", "--port", str(port), "--webui-port",
                                  str(free_port())], work, SPARK_MASTER_OPTS=opts)
    jvms = [master]
    try:
        wait_for(master, line="I have been elected leader")
        url = f"spark://127.0.0.1:{port}"
        worker = start_jvm("worker", ["org.apache.spark.deploy.worker.Worker", "--host",
                                      "127.0.0.1", "--port", str(free_port()), "--webui-port",
                                      str(free_port()), "--cores", "1", "--memory", "1g",
                                      "--work-dir", str(work / "work"), url], work)
        jvms.append(worker)
        wait_for(worker, line="Successfully registered with master")
        yield url
    finally:
        for jvm in reversed(jvms):
            jvm.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """sc://127.0.0.1:<port>: a Spark Connect server (local[1] behind it). Its class ships in
    the pip package's jars (spark-connect_2.13); the Python client needs pyspark[connect]."""
    work = tmp_path_factory.mktemp("spark-connect")
    port = free_port()
    server = start_jvm("connect", [
        "org.apache.spark.deploy.SparkSubmit",
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[1]", "--name", "queueadmin-tests-connect",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.sql.shuffle.partitions=1",
        "--conf", f"spark.local.dir={work / 'local'}",
        # its classes mapped as the embedded server's are (core.pipeline.classes)
        *(["--conf", f"spark.driver.extraJavaOptions={classes.java_option(archive)}"]
          if (archive := classes.usable()) else []),
        "spark-internal",
    ], work)
    try:
        wait_for(server, port=port)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.stop()

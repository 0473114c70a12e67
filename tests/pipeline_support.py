"""Fixtures of the data pipeline tests: one SparkSession for the whole run (local[2], UI off,
one shuffle partition), made the process's session so that the tasks use it, small generated
data, and a way to run a job to its end with an in-process worker."""

from __future__ import annotations

import atexit
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import redis

from core.pipeline import jobs, spark
from core.pipeline.spec import JobSpec, make_spec
from core.queue import Queue
from core.worker import WorkerConfig
from core.worker.runtime import Worker

CARRIERS = ["AA", "B6", "DL", "UA", "WN"]


_SHARED: list[Any] = []  # the one session of the run


def _stop_shared() -> None:
    spark.use_session(None)
    while _SHARED:
        _SHARED.pop().stop()


@pytest.fixture(scope="session")
def spark_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The run's one SparkSession, also the process's (the tasks use it). Each module that
    imports this fixture gets its own session-scoped instance from pytest, so the session is
    made once here and stopped once, when the run ends."""
    if not _SHARED:
        _SHARED.append(spark.build_session(
            spark.SparkTarget(master="local[2]", shuffle_partitions=1,
                              conf=spark.parse_conf(os.environ.get("SPARK_CONF", ""))),
            app="queueadmin-tests",
            local_dir=tmp_path_factory.mktemp("spark-local"),
        ))
        atexit.register(_stop_shared)
    spark.use_session(_SHARED[0])
    yield _SHARED[0]


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

"""What the data pipeline tests share besides their fixtures (tests/pipeline/conftest.py):
small generated data, a job's spec, and a way to run a job to its end with an in-process
worker."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from core.pipeline import jobs, spark_target
from core.pipeline.check import make_spec
from core.pipeline.spec import JobSpec
from core.queue import Queue
from core.worker import WorkerConfig
from core.worker.runtime import Worker

CARRIERS = ["AA", "B6", "DL", "UA", "WN"]


# The suite's Spark JVMs compile with C1 alone: on its small data they start sooner and run
# each job faster (core.pipeline.spark_target.QUICK_JIT).
TEST_JAVA_OPTIONS = spark_target.QUICK_JIT


def jar_dir() -> Path:
    """Where the suite keeps the project's Spark reader jar, built once for every run and test
    process (named by a hash of its sources and the PySpark version)."""
    return Path(tempfile.gettempdir()) / "queueadmin-test-jars"


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

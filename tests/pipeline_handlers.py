"""A transform for the pipeline tests that run real worker processes (`runworker --import
tests.pipeline_handlers`): passes rows through, but the row with id 123 is held in a Python
UDF while the file QA_TEST_HOLD_DIR/hold exists (up to 60 s), after writing
QA_TEST_HOLD_DIR/running: the test then knows a chunk is mid-write, and kills or cancels."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from core.pipeline.transforms import transform

HELD_ID = 123


@transform("pipeline_test_hold")
def hold(chunk: Any) -> Any:
    from pyspark.sql.functions import udf

    where = os.environ.get("QA_TEST_HOLD_DIR", "")

    @udf("long")
    def held(i):  # type: ignore[no-untyped-def]  (hints would make Spark guess a pandas UDF)
        if i == HELD_ID and where and Path(where, "hold").exists():
            Path(where, "running").write_text(str(os.getpid()))
            deadline = time.monotonic() + 60
            while Path(where, "hold").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return i

    return chunk.withColumn("id", held("id"))


@transform("pipeline_test_hold_agg")
def hold_agg(chunk: Any) -> Any:
    """An aggregate over hold()'s rows, held mid-query the same way: a small job that runs in
    one step. (A cross join that runs for hours was used before: Spark's task kill is
    cooperative and its codegen loops never look, so the cancelled query kept the run's
    shared test server's two cores after the test, and every later query there waited.)"""
    from pyspark.sql import functions as F

    # max(id): the held column must be read (a count would let Spark leave the UDF out).
    return hold(chunk).groupBy("carrier").agg(F.max("id").alias("n"))

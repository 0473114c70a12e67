"""A data job traced (issue 38): its submit, each task's run, and a span for its split, each
chunk and its combine under their runs, all one trace, each tagged for Spark with its ids."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from core import tracing
from core.queue import Queue
from tests.pipeline_support import run_job, spec_for

pytestmark = pytest.mark.slow


def test_a_data_jobs_split_chunks_and_combine_are_spans_of_one_trace_tagged_for_spark(
    dq: Queue, spark_session: Any, flights_parquet: tuple[Path, pd.DataFrame], tmp_path: Path,
    spans: InMemorySpanExporter,
) -> None:
    path, _ = flights_parquet
    spec = spec_for(tmp_path, path, chunks=2, sql="SELECT carrier, dep_delay FROM chunk",
                    combine_sql="SELECT carrier, count(*) AS n FROM parts GROUP BY carrier")
    assert run_job(dq, spec).state == "done"
    tracing.flush()
    got = spans.get_finished_spans()
    (send,) = [s for s in got if s.name == "send data"]
    runs = {s.context.span_id: s for s in got if s.name == "process data"}
    steps = [s for s in got if s.name.startswith("datajob ")]
    names = [s.name for s in steps]  # the split uses Spark twice: its analysis, its EXPLAIN
    assert (names.count("datajob chunk"), names.count("datajob combine")) == (2, 1)
    assert names.count("datajob split") >= 1 and len(names) == 3 + names.count("datajob split")
    assert {s.context.trace_id for s in [*runs.values(), *steps]} == {send.context.trace_id}
    for step in steps:
        assert step.parent is not None and step.parent.span_id in runs  # under its task's run
        attrs = dict(step.attributes or {})
        assert attrs["queueadmin.datajob.id"] == spec.job_id
        assert f"qa-trace-{step.context.trace_id:032x}" in attrs["spark.operation_tags"]
        assert f"qa-span-{step.context.span_id:016x}" in attrs["spark.operation_tags"]
    assert sorted(dict(s.attributes or {}).get("queueadmin.datajob.chunk", -1)
                  for s in steps if s.name == "datajob chunk") == [0, 1]
    assert spark_session.getTags() == set()  # the test's own session: untouched

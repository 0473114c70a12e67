"""A data job on a real Spark cluster: a worker process pointed at a standalone master
(SPARK_MASTER) and one pointed at a Spark Connect server (SPARK_REMOTE) give the same output
as the same job on a local session, and the manifest names the cluster it ran on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from core.pipeline import jobs
from core.pipeline.spec import make_spec
from core.queue import Queue
from tests.pipeline_support import (  # noqa: F401  (fixtures)
    dq,
    flights,
    run_job,
    spark_session,
    spec_for,
)
from tests.spark_cluster import spark_connect, spark_standalone  # noqa: F401  (fixtures)

pytestmark = pytest.mark.slow

SQL = ("SELECT carrier, month, sum(dep_delay) AS delay_sum, count(dep_delay) AS n "
       "FROM chunk GROUP BY carrier, month")
COMBINE = ("SELECT carrier, month, sum(delay_sum) / sum(n) AS mean_delay, sum(n) AS n "
           "FROM parts GROUP BY carrier, month ORDER BY carrier, month")


def read(path: str) -> pd.DataFrame:
    return pd.read_parquet(path).sort_values(["carrier", "month"], ignore_index=True)


@pytest.mark.parametrize("where", ["standalone", "connect"])
def test_a_worker_on_a_cluster_gives_the_same_output_as_local(
    where: str, request: pytest.FixtureRequest, spawn_worker: Any, live_queue: Queue,
    dq: Queue, spark_session: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = tmp_path / "flights.parquet"
    flights(900).to_parquet(data, index=False)
    local = spec_for(tmp_path, data, output=str(tmp_path / "local"), sql=SQL,
                     combine_sql=COMBINE, chunks=3)
    assert run_job(dq, local).state == "done"

    url = request.getfixturevalue(f"spark_{where}")
    monkeypatch.setenv("SPARK_REMOTE" if where == "connect" else "SPARK_MASTER", url)
    spec = make_spec(job_id=f"on-{where}", input=str(data), format="parquet",
                     output=str(tmp_path / where), sql=SQL, combine_sql=COMBINE, chunks=3)
    jobs.submit(live_queue, spec)
    worker = spawn_worker(where, "--burst")
    assert worker.wait(240) == 0, (tmp_path / f"{where}.log").read_text()[-3000:]
    st = jobs.status(live_queue, spec.job_id)
    assert st.state == "done", st.failures
    log = (tmp_path / f"{where}.log").read_text()
    assert f"spark session ready master={url}" in log
    assert st.manifest is not None
    # Through Spark Connect the manifest has the server's own master (local[1] here).
    assert st.manifest["master"] == (url if where == "standalone" else "local[1]")
    assert [c["rows_in"] for c in st.manifest["chunks"]] == [300, 300, 300]
    pd.testing.assert_frame_equal(read(spec.output), read(local.output), rtol=1e-12)

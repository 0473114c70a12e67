"""A data job on a real Spark cluster: a worker process with a classic session on a standalone
master (SPARK_MASTER, the project's reader jar given to it) and one pointed at a Spark
Connect server that lacks the project's reader (SPARK_REMOTE: a chunk inside a file is then
read as the file filtered to its rows) give the same output as the same job on the run's own
Connect server, and the manifest names where it ran."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from core.pipeline import jobs
from core.pipeline.check import make_spec
from core.queue import Queue
from core.queue import read as queue_read
from tests.pipeline_support import flights, run_job, spec_for

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
    dq: Queue, connect_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = tmp_path / "flights.parquet"
    flights(900).to_parquet(data, index=False, row_group_size=300)
    local = spec_for(tmp_path, data, output=str(tmp_path / "local"), sql=SQL,
                     combine_sql=COMBINE, chunks=3)
    assert run_job(dq, local).state == "done"

    url = request.getfixturevalue(f"spark_{where}")
    if where == "connect":
        monkeypatch.setenv("SPARK_REMOTE", url)
    else:  # SPARK_REMOTE (the run's server) would win over SPARK_MASTER
        monkeypatch.delenv("SPARK_REMOTE")
        monkeypatch.setenv("SPARK_MASTER", url)
    spec = make_spec(job_id=f"on-{where}", input=str(data), format="parquet",
                     output=str(tmp_path / where), sql=SQL, combine_sql=COMBINE, chunks=3)
    jobs.submit(live_queue, spec)
    worker = spawn_worker(where, "--burst")
    assert worker.wait(240) == 0, (tmp_path / f"{where}.log").read_text()[-3000:]
    st = jobs.status(live_queue, spec.job_id)
    assert st.state == "done", st.failures
    log = (tmp_path / f"{where}.log").read_text()
    assert (f"spark session ready master={url}" if where == "standalone"
            else f"spark connect session ready url={url}") in log
    assert st.manifest is not None
    # Through Spark Connect the manifest has the server's own master (local[1] here).
    assert st.manifest["master"] == (url if where == "standalone" else "local[1]")
    assert [c["rows_in"] for c in st.manifest["chunks"]] == [300, 300, 300]
    # Row groups through the project's reader (its jar given to the classic session); rows
    # of the file on a Connect server that does not have it.
    assert st.manifest["split"] == ("row groups" if where == "standalone" else "rows")
    pd.testing.assert_frame_equal(read(spec.output), read(local.output), rtol=1e-12)
    # Each chunk reported its Spark progress: pushed by Spark Connect, polled from the
    # classic session's status tracker (core.pipeline.progress); all its Spark tasks done.
    chunks = queue_read.progress(live_queue, spec.job_id)
    assert len(chunks) >= 3 and all(p.total and p.done == p.total for p in chunks), chunks
    assert all(p.message.startswith("Spark: ") for p in chunks)

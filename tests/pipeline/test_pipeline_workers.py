"""Data jobs on real worker processes, thin clients of a Spark Connect server: a worker killed
with SIGKILL mid-chunk has its chunk redone by another as soon as its lease is reaped, and the
output has every row once; a cancel reaches the running Spark job and the worker removes the
job's staging; when the Spark server itself dies, the running chunk goes back to waiting
without spending an attempt, the workers wait for the server, and the job finishes once it is
back."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import tests.pipeline_handlers  # noqa: F401  (registers the transform for make_spec's check)
from core.pipeline import classes, jobs, jvm, server
from core.pipeline.check import make_spec
from core.procs import free_port, wait_listening
from core.queue import Queue, read
from tests.pipeline_support import TEST_JAVA_OPTIONS, flights, jar_dir

pytestmark = pytest.mark.slow

DEAD_AFTER = 2.0  # the spawn_worker fixture's --dead-after


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := cond():
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def holding(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The hold file of tests.pipeline_handlers' transforms (the spawned workers get the
    folder), taken away at the test's end whatever came of it: a held UDF then returns at
    once, and the run's Spark server has its cores back for the next test."""
    monkeypatch.setenv("QA_TEST_HOLD_DIR", str(tmp_path))
    hold = tmp_path / "hold"
    hold.touch()
    yield hold
    hold.unlink(missing_ok=True)


@pytest.fixture
def held_job(tmp_path: Path, holding: Path) -> Any:
    """A 3-chunk job whose chunk holding id 123 (chunk 1) waits in a Python UDF on the Spark
    server while tmp_path/hold exists (the transform reads the folder when the worker builds
    the chunk's plan: the env var reaches the spawned workers)."""
    df = flights(300)
    data = tmp_path / "in.parquet"
    df.to_parquet(data, index=False, row_group_size=100)
    spec = make_spec(job_id="held1", input=str(data), format="parquet",
                     output=str(tmp_path / "out"), transform="pipeline_test_hold", chunks=3)
    return spec, df


def start(spawn_worker: Any, name: str, *options: str) -> subprocess.Popen[bytes]:
    return spawn_worker(name, "--import", "tests.pipeline_handlers", *options)


def holder_of(q: Queue, job: str, chunk_task: str) -> str | None:
    for entry in read.pending(q, job):
        if entry.task_id == chunk_task and not entry.consumer.startswith("~"):
            return entry.consumer
    return None


def leased(q: Queue, job: str) -> list[tuple[str, str]]:
    """(task, worker) of the job's tasks leased now."""
    return [(e.task_id, e.consumer) for e in read.pending(q, job)
            if not e.consumer.startswith("~")]


def test_a_chunk_whose_worker_is_killed_is_redone_as_soon_as_its_lease_is_reaped(
    spawn_worker: Any, connect_url: str, live_queue: Queue, held_job: Any, tmp_path: Path
) -> None:
    spec, df = held_job
    jobs.submit(live_queue, spec, jobs.QueueOptions(max_attempts=3, concurrency=1))
    first = start(spawn_worker, "w1")
    wait_for(lambda: (tmp_path / "running").exists(), "chunk 1 to be mid-write")
    [(task, holder)] = leased(live_queue, spec.job_id)  # concurrency 1: chunk 1 alone
    assert holder == "w1"
    second = start(spawn_worker, "w2")  # a free worker, waiting (concurrency 1)
    wait_for(lambda: (tmp_path / "w2.log").exists() and "worker started" in
             (tmp_path / "w2.log").read_text(), "w2 to start")
    (tmp_path / "hold").unlink()  # the next run of the chunk is not held
    killed_at = time.monotonic()
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    wait_for(lambda: holder_of(live_queue, spec.job_id, task) == "w2",
             "the killed worker's chunk to run on w2", timeout=30)
    # Running again once the lease is reaped: --dead-after, plus the reaper's round.
    assert time.monotonic() - killed_at <= DEAD_AFTER + 2
    assert live_queue.wait(spec.job_id, timeout=60) == "done"
    assert live_queue.wait(jobs.combine_id(spec.job_id), timeout=60) == "done"
    st = jobs.status(live_queue, spec.job_id)
    assert st.state == "done", st.failures
    got = pd.read_parquet(spec.output).sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, df)  # every row exactly once
    assert st.manifest is not None
    assert [c["attempt"] for c in st.manifest["chunks"]] == [1, 2, 1]
    assert st.manifest["chunks"][1]["worker"] == "w2"
    assert not spec.staging.exists()
    # A Connect worker keeps no scratch of its own: nothing under its var/spark.
    assert not (tmp_path / "var" / "spark").exists()
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0


def test_cancel_reaches_the_running_spark_job_and_no_output_is_marked_complete(
    spawn_worker: Any, connect_url: str, live_queue: Queue, held_job: Any, tmp_path: Path
) -> None:
    spec, _ = held_job
    jobs.submit(live_queue, spec)
    worker = start(spawn_worker, "w1")
    wait_for(lambda: (tmp_path / "running").exists(), "chunk 1 to be mid-write")
    cancelled_at = time.monotonic()
    live_queue.cancel(spec.job_id)
    assert live_queue.wait(spec.job_id, timeout=30) == "cancelled"
    # Within seconds, though the held row would have held the chunk for a minute.
    assert time.monotonic() - cancelled_at < 20
    assert (tmp_path / "hold").exists()
    assert live_queue.state(jobs.combine_id(spec.job_id)) == "cancelled"
    assert jobs.status(live_queue, spec.job_id).state == "cancelled"
    assert not Path(spec.output).exists()
    # The worker whose chunk stopped removes the job's staging: nobody runs `datajob clean`.
    removed = f"data job {spec.job_id} cancelled: removed its staging {spec.staging}"
    wait_for(lambda: removed in (tmp_path / "w1.log").read_text(),
             "the worker to remove the staging", 20)
    assert not spec.staging.exists()
    assert "task stopped: request cancelled" in (tmp_path / "w1.log").read_text()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    (tmp_path / "hold").unlink()


@pytest.mark.django_db
def test_datajob_cancel_stops_the_running_chunk_then_removes_the_staging_data(
    spawn_worker: Any, connect_url: str, live_queue: Queue, held_job: Any, tmp_path: Path,
    settings: Any, redis_server: Any, prefix: str,
) -> None:
    import io

    from core.cli.datajob import cancel

    settings.REDIS_URL, settings.QUEUE_PREFIX = redis_server.url, prefix  # queue "q" here
    spec, _ = held_job
    jobs.submit(live_queue, spec)
    worker = start(spawn_worker, "w1")
    wait_for(lambda: (tmp_path / "running").exists(), "chunk 1 to be mid-write")
    out = io.StringIO()
    started = time.monotonic()
    cancel(spec.job_id, queue="q", stdout=out)
    # It waited for the running chunk to stop (its Spark job interrupted), not for the hold.
    assert time.monotonic() - started < 25
    assert (tmp_path / "hold").exists()
    said = out.getvalue().splitlines()
    assert len(said) == 2 and said[0] == f"data job {spec.job_id} cancelled"
    # Removed by the command, or a moment before it by the worker whose chunk stopped.
    if said[1] == f"data job {spec.job_id}: no staging left":
        by_worker = f"data job {spec.job_id} cancelled: removed its staging {spec.staging}"
        wait_for(lambda: by_worker in (tmp_path / "w1.log").read_text(), "the worker's log", 5)
    else:
        assert said[1].startswith(f"data job {spec.job_id}: removed its staging {spec.staging} (")
    assert not spec.staging.exists()
    assert live_queue.state(spec.job_id) == "cancelled"
    assert live_queue.state(jobs.combine_id(spec.job_id)) == "cancelled"
    assert not Path(spec.output).exists()
    assert [p.name for p in Path(spec.output).parent.iterdir() if ".staging" in p.name] == []
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    (tmp_path / "hold").unlink()


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[Any]:
    """A Spark Connect server of this test alone (it gets killed), started as the stack starts
    its own; `restart()` starts it again on the same port."""
    config = server.ServerConfig(
        port=free_port(), local_dir=tmp_path / "spark-local", jar=jvm.ensure_jar(jar_dir()),
        cores="2", conf=(("spark.driver.extraJavaOptions", TEST_JAVA_OPTIONS),),
        class_archive=classes.usable())
    procs: list[subprocess.Popen[bytes]] = []

    def launch() -> subprocess.Popen[bytes]:
        server.prepare(config)
        with open(tmp_path / "server.log", "ab") as log:
            proc = subprocess.Popen(server.argv(config), env=server.env(), stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(proc)
        assert wait_listening("127.0.0.1", config.port, timeout=120,
                              alive=lambda: proc.poll() is None)
        return proc

    class Own:
        url = config.url
        proc = launch()

        def restart(self) -> None:
            self.proc = launch()

    yield Own()
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(30)


def test_a_dead_spark_server_gives_the_chunk_back_and_the_workers_wait_for_it(
    spawn_worker: Any, live_queue: Queue, held_job: Any, tmp_path: Path, own_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec, df = held_job
    monkeypatch.setenv("SPARK_REMOTE", own_server.url)  # the spawned worker's Spark
    jobs.submit(live_queue, spec, jobs.QueueOptions(max_attempts=1))
    worker = start(spawn_worker, "w1")
    wait_for(lambda: (tmp_path / "running").exists(), "chunk 1 to be mid-write")
    os.kill(own_server.proc.pid, signal.SIGKILL)
    log = tmp_path / "w1.log"
    wait_for(lambda: "task given back: chunk 1 of job held1: the Spark Connect server went "
             "away" in log.read_text(), "the chunk to be given back", 60)
    wait_for(lambda: "takes no task while the Spark Connect server at" in log.read_text(),
             "the worker to wait for the server", 30)
    info = read.request(live_queue, spec.job_id)
    assert info is not None and info.dead == 0  # max_attempts=1: no attempt was spent
    (tmp_path / "hold").unlink()
    own_server.restart()
    assert live_queue.wait(jobs.combine_id(spec.job_id), timeout=120) == "done", \
        log.read_text()[-3000:]
    got = pd.read_parquet(spec.output).sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, df)
    assert "takes tasks; no longer true after" in log.read_text()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0


def cancel_and_see_it_stop(q: Queue, spec: Any, worker: subprocess.Popen[bytes], log: Path,
                           what: str) -> None:
    """Cancel the job: its running task stops within 20 s, the job reads cancelled, no
    output is put in place; then the worker stops cleanly."""
    cancelled_at = time.monotonic()
    q.cancel(spec.job_id)
    wait_for(lambda: "task stopped: request cancelled" in log.read_text(), f"{what} to stop",
             20)
    assert time.monotonic() - cancelled_at < 20
    assert jobs.status(q, spec.job_id).state == "cancelled"
    assert not Path(spec.output).exists()
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0


HELD_COMBINE = "SELECT carrier, max(n) AS n FROM parts GROUP BY carrier"


def test_cancel_stops_a_chunk_whose_result_comes_back_to_its_worker(
    spawn_worker: Any, live_queue: Queue, tmp_path: Path, own_server: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunk of an aggregate fetches its result over Arrow (no Spark write: no temporary
    folder for its part while it runs); a cancel interrupts that fetch as it does a write.
    On a server of its own: the chunk's query (a cross join: hours) is one Spark's
    cooperative task kill never stops — its codegen loops do not look — so on the run's
    shared server it kept both cores after the test, and every later query there waited
    (the pytest-timeouts of stop 40's CI and a fresh-clone run)."""
    monkeypatch.setenv("SPARK_REMOTE", own_server.url)  # the spawned worker's Spark
    data = tmp_path / "in.parquet"
    flights(300).to_parquet(data, index=False)
    endless = ("SELECT a.carrier, count(*) AS n FROM chunk a CROSS JOIN chunk b CROSS JOIN "
               "chunk c CROSS JOIN chunk d CROSS JOIN chunk e GROUP BY a.carrier")
    # Two chunks (one would run in one step, in the split's task: the next test).
    spec = make_spec(job_id="endless1", input=str(data), format="parquet",
                     output=str(tmp_path / "out"), sql=endless,
                     combine_sql="SELECT carrier, sum(n) AS n FROM parts GROUP BY carrier",
                     chunks=2)
    jobs.submit(live_queue, spec)
    worker = start(spawn_worker, "w1")
    wait_for(lambda: leased(live_queue, spec.job_id) and spec.part_dir(0).parent.is_dir(),
             "the chunk to run")
    time.sleep(2)  # well into its Spark job (150^5 rows: hours)
    assert not list(spec.part_dir(0).parent.iterdir())  # no part being written by Spark
    cancel_and_see_it_stop(live_queue, spec, worker, tmp_path / "w1.log", "the chunk")


def test_cancel_stops_a_small_job_running_in_one_step(
    spawn_worker: Any, connect_url: str, live_queue: Queue, tmp_path: Path, holding: Path
) -> None:
    """A small job runs in one step in its split's task (core/pipeline/onestep.py); a cancel
    stops its Spark query as it stops a chunk's, and no output is put in place."""
    data = tmp_path / "in.parquet"
    flights(300).to_parquet(data, index=False)
    spec = make_spec(job_id="endless2", input=str(data), format="parquet",
                     output=str(tmp_path / "out"), transform="pipeline_test_hold_agg",
                     combine_sql=HELD_COMBINE)
    jobs.submit(live_queue, spec)
    worker = start(spawn_worker, "w2")
    wait_for(lambda: (tmp_path / "running").exists(), "the one step to be held in its query")
    assert leased(live_queue, spec.job_id) and spec.staging.is_dir()
    assert jobs.records(live_queue).get(spec.job_id, "chunks") == "1"
    cancel_and_see_it_stop(live_queue, spec, worker, tmp_path / "w2.log", "the one step")

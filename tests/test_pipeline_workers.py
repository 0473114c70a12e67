"""Data jobs on real worker processes (each with its own Spark JVM): a worker SIGKILLed while
its chunk is being written has the chunk redone elsewhere and the output has every row once;
a cancel reaches the running Spark job, no output is marked complete and the worker removes
the job's staging once its chunk has stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import tests.pipeline_handlers  # noqa: F401  (registers the transform for make_spec's check)
from core.pipeline import jobs
from core.pipeline.spec import make_spec
from core.queue import Queue
from tests.pipeline_support import flights

pytestmark = pytest.mark.slow


def wait_for(cond: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if got := cond():
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def held_job(tmp_path: Path, live_queue: Queue, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A 3-chunk job whose chunk holding id 123 (chunk 1) waits while tmp_path/hold exists."""
    monkeypatch.setenv("QA_TEST_HOLD_DIR", str(tmp_path))  # inherited by spawned workers
    (tmp_path / "hold").touch()
    df = flights(300)
    data = tmp_path / "in.parquet"
    df.to_parquet(data, index=False)
    spec = make_spec(job_id="held1", input=str(data), format="parquet",
                     output=str(tmp_path / "out"), transform="pipeline_test_hold", chunks=3)
    return spec, df


def start(spawn_worker: Any, name: str, *options: str) -> subprocess.Popen[bytes]:
    return spawn_worker(name, "--import", "tests.pipeline_handlers", *options)


def test_a_chunk_whose_worker_is_killed_mid_write_is_redone_without_duplicate_rows(
    spawn_worker: Any, live_queue: Queue, held_job: Any, tmp_path: Path
) -> None:
    spec, df = held_job
    jobs.submit(live_queue, spec, jobs.QueueOptions(max_attempts=3))
    first = start(spawn_worker, "w1")
    wait_for(lambda: (tmp_path / "running").exists(), "chunk 1 to be mid-write")
    os.kill(first.pid, signal.SIGKILL)
    first.wait(10)
    (tmp_path / "hold").unlink()
    second = start(spawn_worker, "w2", "--burst")
    assert second.wait(120) == 0, (tmp_path / "w2.log").read_text()[-3000:]
    st = jobs.status(live_queue, spec.job_id)
    assert st.state == "done", st.failures
    got = pd.read_parquet(spec.output).sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, df)  # every row exactly once
    assert st.manifest is not None
    # Chunk 1 (ids 100-199) was redone: the killed delivery counted as an attempt.
    assert [c["attempt"] for c in st.manifest["chunks"]] == [1, 2, 1]
    assert st.manifest["chunks"][1]["worker"] == "w2"
    assert not spec.staging.exists()


def test_cancel_reaches_the_running_spark_job_and_no_output_is_marked_complete(
    spawn_worker: Any, live_queue: Queue, held_job: Any, tmp_path: Path
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
    spawn_worker: Any, live_queue: Queue, held_job: Any, tmp_path: Path, settings: Any,
    redis_server: Any, prefix: str,
) -> None:
    import io

    from core.cli.datajob import cancel

    settings.REDIS_URL, settings.QUEUE_PREFIX = redis_server.url, prefix  # queue "q" here
    spec, _ = held_job
    jobs.submit(live_queue, spec)
    worker = start(spawn_worker, "w1")
    wait_for(lambda: (tmp_path / "running").exists(), "chunk 1 to be mid-write")
    assert spec.staging.exists()  # the chunks staged so far
    out = io.StringIO()
    started = time.monotonic()
    cancel(spec.job_id, queue="q", stdout=out)
    # It waited for the running chunk to stop (its Spark job cancelled), not for the hold.
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
    # Nothing left that looks complete: no output, no staging anywhere beside it.
    assert not Path(spec.output).exists()
    assert [p.name for p in Path(spec.output).parent.iterdir() if ".staging" in p.name] == []
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    (tmp_path / "hold").unlink()
    assert not spec.staging.exists()  # the stopped chunk wrote nothing afterwards


def jvm_of(worker_pid: int) -> int | None:
    """The pid of the Spark JVM a worker started (its app name carries the worker's pid)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"java") and f"queueadmin-worker-{worker_pid}".encode() \
                in b" ".join(cmd):
            return int(proc.name)
    return None


def test_a_dead_jvm_makes_the_worker_exit_and_its_chunk_runs_again(
    spawn_worker: Any, live_queue: Queue, held_job: Any, tmp_path: Path
) -> None:
    spec, df = held_job
    jobs.submit(live_queue, spec, jobs.QueueOptions(max_attempts=3))
    first = start(spawn_worker, "w1")
    wait_for(lambda: (tmp_path / "running").exists(), "chunk 1 to be mid-write")
    jvm = jvm_of(first.pid)
    assert jvm is not None
    assert os.getsid(jvm) != os.getsid(first.pid)  # the JVM runs in a session of its own
    os.kill(jvm, signal.SIGKILL)
    assert first.wait(60) == 0  # it stopped itself, for its supervisor to start a fresh one
    log = (tmp_path / "w1.log").read_text()
    assert "spark JVM died in chunk 1 of job held1: stopping this worker" in log
    assert "JvmDied: chunk 1 of job held1: the worker's Spark JVM died" in log
    (tmp_path / "hold").unlink()
    second = start(spawn_worker, "w2", "--burst")
    assert second.wait(120) == 0, (tmp_path / "w2.log").read_text()[-3000:]
    st = jobs.status(live_queue, spec.job_id)
    assert st.state == "done", st.failures
    assert st.manifest is not None
    assert [c["attempt"] for c in st.manifest["chunks"]] == [1, 2, 1]
    got = pd.read_parquet(spec.output).sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got, df)

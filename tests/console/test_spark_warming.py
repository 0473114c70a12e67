"""While the stack's Spark warms up (issue 33, 13: the first data job after "queueadmin is up"
took 50 s and nothing said why), Redis says so (core.queue.spark_warming, written by
`warmspark`): the overview and the data jobs form show it, and a data job submitted meanwhile,
from the console or `datajob submit`, says that it waits for Spark. `warmspark` itself, with a
real Spark Connect server: tests/pipeline/test_pipeline_warming.py; the whole stack:
tests/stack/test_stack_spark_warming.py."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from core.queue import Queue, spark_warming
from core.queue.keys import spark_warming_key
from core.stack.redis_server import free_port

pytestmark = pytest.mark.django_db

NOTICE = 'id="spark-warming"'


def warming(q: Queue, phase: str = spark_warming.FIRST_JOB, ttl_s: float = 60) -> None:
    spark_warming.mark(q.redis, prefix=q.keys.prefix, url="sc://127.0.0.1:15002",
                       phase=phase, ttl_s=ttl_s, since_ms=q.now_ms() - 12_000)


def job_form(tmp_path: Path) -> dict[str, str]:
    data = tmp_path / "in.parquet"
    pd.DataFrame({"carrier": ["AA"]}).to_parquet(data, index=False)
    return {"input": str(data), "format": "parquet", "sql": "SELECT * FROM chunk",
            "output": str(tmp_path / "out"), "output_format": "parquet"}


def test_the_overview_and_the_data_jobs_form_say_spark_is_warming(admin: Client,
                                                                  console: Queue) -> None:
    for path in ("/", "/jobs/"):
        assert NOTICE not in admin.get(path).content.decode(), path
    warming(console)
    overview = admin.get("/").content.decode()
    assert NOTICE in overview
    assert "Spark is warming up (its first job runs, 12 s so far): a data job queued now " \
           "waits for Spark until it is warm" in overview
    jobs = admin.get("/jobs/").content.decode()
    assert NOTICE in jobs and "a job submitted now waits for Spark" in jobs
    spark_warming.clear(console.redis, prefix=console.keys.prefix)  # warm
    for path in ("/", "/jobs/"):
        assert NOTICE not in admin.get(path).content.decode(), path


def test_the_notice_says_when_the_server_is_not_listening_yet(admin: Client,
                                                              console: Queue) -> None:
    warming(console, spark_warming.STARTING)
    assert "Spark is warming up (its server is starting" in admin.get("/").content.decode()


def test_a_job_submitted_in_the_console_meanwhile_says_it_waits_for_spark(
        admin: Client, console: Queue, tmp_path: Path) -> None:
    warming(console)
    done = admin.post("/jobs/submit/?queue=default", job_form(tmp_path), follow=True)
    assert done.status_code == 200
    assert "this job waits for Spark (warming), and starts once it is warm" in \
        done.content.decode()


def test_datajob_submit_meanwhile_says_it_waits_for_spark(console: Queue,
                                                          tmp_path: Path) -> None:
    form = job_form(tmp_path)
    argv = ["datajob", "submit", "--input", form["input"], "--format", "parquet", "--sql",
            form["sql"]]
    err = io.StringIO()
    call_command(*argv, "--output", str(tmp_path / "cold"), stdout=io.StringIO(), stderr=err)
    assert "waits for Spark" not in err.getvalue()  # warm: nothing to say
    warming(console)
    err = io.StringIO()
    call_command(*argv, "--output", str(tmp_path / "warming"), stdout=io.StringIO(), stderr=err)
    assert "waits for Spark (warming): Spark is warming up (its first job runs, 12 s so " \
           "far); it starts once Spark is warm" in err.getvalue()


def test_the_marker_expires_by_itself(console: Queue) -> None:
    warming(console, ttl_s=30)
    ttl = console.redis.ttl(spark_warming_key(console.keys.prefix))
    assert 0 < ttl <= 30  # a warm-up killed mid-way leaves no notice behind for long


def test_warmspark_marks_its_wait_and_clears_it_when_it_gives_up(console: Queue,
                                                                 wait_until: Any) -> None:
    """A real `warmspark` on a port where no server listens (yet): "starting" meanwhile, and
    nothing once it gives up."""
    url = f"sc://127.0.0.1:{free_port()}"
    failed: list[BaseException] = []

    def run() -> None:
        try:
            call_command("warmspark", "--url", url, "--timeout", "3", stdout=io.StringIO(),
                         stderr=io.StringIO())
        except BaseException as exc:  # the test reads it
            failed.append(exc)

    t = threading.Thread(target=run)
    t.start()
    seen = wait_until(lambda: spark_warming.read(console.redis, prefix=console.keys.prefix),
                      5, "the warming marker")
    assert (seen.url, seen.phase) == (url, spark_warming.STARTING)
    t.join(15)
    assert isinstance(failed[0], CommandError) and "did not listen within 3 s" in str(failed[0])
    assert spark_warming.read(console.redis, prefix=console.keys.prefix) is None

"""`manage.py warmspark` on a real Spark Connect server (the run's): while its first job runs,
Redis says "Spark warming" (phase "first job"), which the console and `datajob submit` show
(tests/console/test_spark_warming.py); once Spark is warm, nothing (issue 33, 13)."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from core.queue import Queue, spark_warming

pytestmark = pytest.mark.django_db


def test_warmspark_says_spark_is_warming_until_its_first_job_is_done(
        connect_url: str, django_queue: Queue, settings: Any, tmp_path: Path,
        wait_until: Any) -> None:
    settings.VAR_DIR = tmp_path  # the warm-up's scratch files
    q = django_queue
    out = io.StringIO()
    failed: list[BaseException] = []

    def run() -> None:
        try:
            call_command("warmspark", "--url", connect_url, stdout=out, stderr=io.StringIO())
        except BaseException as exc:  # the test reads it
            failed.append(exc)

    t = threading.Thread(target=run)
    t.start()
    try:
        seen = wait_until(
            lambda: (w := spark_warming.read(q.redis, prefix=q.keys.prefix)) is not None
            and w.phase == spark_warming.FIRST_JOB and w, 60, "the first job's marker")
        assert seen.url == connect_url
        assert "Spark is warming up (its first job runs" in seen.describe()
    finally:
        t.join(180)
    assert not failed, failed
    assert "spark is warm: listening after" in out.getvalue()
    assert spark_warming.read(q.redis, prefix=q.keys.prefix) is None

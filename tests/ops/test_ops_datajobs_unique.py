"""A data job is unique on its output path by default (issue 37): a second job writing the same
output while the first waits or runs (its chunks, then its combine step) creates nothing, and
the submit answers with the first job; the audit entry says so. unique_output=False opts out;
a schedule's runs are not unique on their output."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from core.models import AuditEntry
from core.ops import datajobs
from core.pipeline import jobs
from core.pipeline.check import make_spec
from core.pipeline.spec import JobSpec
from core.pipeline.unique_output import output_key
from core.queue import Queue, read
from tests.ops_support import CLI

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]


def spec(tmp_path: Path, job_id: str, out: str = "out") -> JobSpec:
    data = tmp_path / "in.parquet"
    if not data.exists():
        pd.DataFrame({"carrier": ["AA", "UA"]}).to_parquet(data, index=False)
    return make_spec(job_id=job_id, input=str(data), format="parquet",
                     output=str(tmp_path / out), sql="SELECT * FROM chunk")


def run_step(q: Queue, rid: str) -> None:
    """Finish the job's request `rid` as its worker would (its tasks acked; no Spark)."""
    info = read.request(q, rid)
    if info is not None and info.state == "open":
        q.seal(rid)
    for lease in q.dequeue("w", 100):
        q.ack(lease)
    assert read.request(q, rid).state == "done"  # type: ignore[union-attr]


def test_a_second_job_to_the_same_output_returns_the_first_until_it_is_written(
    django_queue: Queue, tmp_path: Path
) -> None:
    first = datajobs.submit(CLI, django_queue.name, spec(tmp_path, "j1"))
    assert first.created and not first.same_output
    info = read.request(django_queue, "j1")
    assert info is not None and info.unique_key == output_key(str(tmp_path / "out"))

    again = datajobs.submit(CLI, django_queue.name, spec(tmp_path, "j2"))
    assert (again.created, again.job_id, again.same_output) == (False, "j1", True)
    assert read.request(django_queue, "j2") is None and not jobs.records(django_queue).has(
        "j2", "spec")
    entry = AuditEntry.objects.order_by("-id").first()
    assert entry is not None and (entry.acted, entry.skipped) == (0, 1)
    assert "(job j1 writes that output: nothing submitted)" in entry.target
    assert read.stats(django_queue).totals.get("duplicates") == 1

    run_step(django_queue, "j1")  # the chunks are done: the combine step holds the output
    while_combining = datajobs.submit(CLI, django_queue.name, spec(tmp_path, "j4"))
    assert (while_combining.created, while_combining.job_id) == (False, "j1")

    other = datajobs.submit(CLI, django_queue.name, spec(tmp_path, "j3", out="elsewhere"))
    assert other.created  # another output: its own key

    run_step(django_queue, "j1.combine")  # written: the output is free again
    assert datajobs.submit(CLI, django_queue.name, spec(tmp_path, "j5")).created


def test_the_same_job_again_is_still_just_submitted_before(django_queue: Queue,
                                                          tmp_path: Path) -> None:
    datajobs.submit(CLI, django_queue.name, spec(tmp_path, "j1"))
    again = datajobs.submit(CLI, django_queue.name, spec(tmp_path, "j1"))
    assert (again.created, again.job_id, again.same_output) == (False, "j1", False)


def test_unique_output_false_opts_out(django_queue: Queue, tmp_path: Path) -> None:
    datajobs.submit(CLI, django_queue.name, spec(tmp_path, "j1"))
    second = datajobs.submit(CLI, django_queue.name, spec(tmp_path, "j2"), unique_output=False)
    assert second.created and read.request(django_queue, "j2") is not None
    assert not jobs.submit(django_queue, spec(tmp_path, "j3"))  # the engine-side default


def test_an_output_path_the_engine_cannot_take_as_a_key_is_keyed_by_its_digest() -> None:
    assert output_key("/data/out/flights") == "output:/data/out/flights"
    odd = output_key("/data/out/my flights (2026)")
    assert odd.startswith("output:sha256:") and odd != output_key("/data/out/my flights")
    assert output_key("/d/" + "x" * 300).startswith("output:sha256:")


def test_the_command_says_which_job_writes_the_output(django_queue: Queue,
                                                      tmp_path: Path) -> None:
    from core.cli.datajob import submit

    submit(spec(tmp_path, "j1"), stdout=io.StringIO(), stderr=io.StringIO())
    out = io.StringIO()
    submit(spec(tmp_path, "j2"), stdout=out, stderr=io.StringIO())
    assert out.getvalue().startswith("j1 (writes that output and has not finished")


def test_the_console_form_shows_the_job_writing_the_output(
    django_queue: Queue, tmp_path: Path, settings: Any, client: Any
) -> None:
    from tests.ops_support import user

    settings.CONSOLE_CACHE_S = 0
    u = user("otto", "operator")
    client.force_login(u)
    datajobs.submit(CLI, django_queue.name, spec(tmp_path, "j1"))
    data = tmp_path / "in.parquet"
    response = client.post("/jobs/submit/", {
        "queue": "default", "input": str(data), "format": "parquet",
        "output": str(tmp_path / "out"), "output_format": "parquet",
        "sql": "SELECT * FROM chunk", "request_id": "j2"}, follow=False)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert "/jobs/default/j1/" in response["Location"]

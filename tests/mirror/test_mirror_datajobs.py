"""Data jobs in the database (issue 35): the mirror copies a data job's record and requests into
DataJob and DataJobChunk rows as the job runs and when it finishes (spec, split plan, EXPLAIN,
chunk reports with Spark's bytes, manifest, failures), idempotently; the rows outlive the
record; a job no event showed this mirror is found through the queue's index of job records;
a record that is not a job's is skipped and the mirror goes on. No Spark: the job's tasks are
leased and acked by hand, and its record written as its tasks write it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.mirror import datajobs as mirrored
from core.models.datajobs import DataJob, DataJobChunk
from core.pipeline import jobs
from core.pipeline.spec import JobSpec
from core.queue import Queue
from tests.datajobs_support import EXPLAIN, combine, report, run_chunks, split, submitted
from tests.mirror_support import mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]

def test_a_submitted_job_gets_its_row_at_once_running(queue: Queue, tmp_path: Path) -> None:
    spec = submitted(queue, tmp_path)
    mirror(queue)
    row = DataJob.objects.get(queue="q", job_id="dj1")
    assert row.state == "running" and row.finished_at is None
    assert JobSpec.from_dict(json.loads(row.spec)) == spec
    assert row.chunks is None and row.plan == "" and row.explain_sql == ""


def test_a_finished_job_has_its_plan_explain_chunks_manifest_and_end_in_its_rows(
    queue: Queue, tmp_path: Path
) -> None:
    spec = submitted(queue, tmp_path)
    split(queue, spec)
    run_chunks(queue, spec)
    manifest = combine(queue, spec)
    mirror(queue)
    row = DataJob.objects.get(queue="q", job_id="dj1")
    assert row.state == "done" and row.finished_at is not None
    assert (row.split_how, row.chunks, row.input_rows, row.split_seconds) == (
        "row groups", 2, 2, 0.125)
    assert json.loads(row.plan)["reads"][1]["groups"] == [[spec.input, 1, 2]]
    assert row.explain_sql == EXPLAIN and "HashAggregate" in row.explain_combine
    assert json.loads(row.manifest) == manifest
    assert (row.chunks_done, row.chunks_failed, row.rows_in, row.rows_out) == (2, 0, 2, 2)
    assert (row.chunk_seconds, row.combine_seconds) == (2.0, 0.25)
    chunks = {c.chunk: c for c in DataJobChunk.objects.filter(job=row)}
    assert sorted(chunks) == [0, 1]
    one = chunks[1]
    assert (one.state, one.rows_in, one.rows_out, one.seconds, one.attempt, one.worker) == (
        "done", 1, 1, 1.5, 1, "w-one")
    assert (one.input_bytes, one.shuffle_read_bytes, one.shuffle_write_bytes,
            one.part_written_by) == (1001, 60, 61, "worker")


def test_copying_again_changes_nothing(queue: Queue, tmp_path: Path) -> None:
    spec = submitted(queue, tmp_path)
    split(queue, spec)
    run_chunks(queue, spec)
    combine(queue, spec)
    mirror(queue)
    before = DataJob.objects.values().get(job_id="dj1")
    chunks = list(DataJobChunk.objects.values().order_by("chunk"))
    for _ in range(2):
        assert mirrored.sync(queue, "dj1") is not None
    after = DataJob.objects.values().get(job_id="dj1")
    assert {k: v for k, v in after.items() if k != "updated_at"} == {
        k: v for k, v in before.items() if k != "updated_at"}
    assert list(DataJobChunk.objects.values().order_by("chunk")) == chunks
    assert DataJob.objects.count() == 1


def test_chunks_reach_the_rows_as_they_report_without_an_event(
    queue: Queue, tmp_path: Path
) -> None:
    """A chunk's report is no event of its own: the mirror's refresh of the jobs still
    running copies it."""
    spec = submitted(queue, tmp_path)
    split(queue, spec)
    mirror(queue)
    assert DataJob.objects.get(job_id="dj1").chunks == 2
    assert not DataJobChunk.objects.exists()
    jobs.records(queue).put(spec.job_id, {"chunk:0": report(0)})  # a worker's report
    mirror(queue)
    [c] = DataJobChunk.objects.all()
    assert (c.chunk, c.state, c.input_bytes) == (0, "done", 1000)
    assert DataJob.objects.get(job_id="dj1").chunks_done == 1


def test_a_failed_chunk_is_a_failed_row_with_its_dead_letter_and_group(
    queue: Queue, tmp_path: Path
) -> None:
    spec = submitted(queue, tmp_path)
    split(queue, spec)
    run_chunks(queue, spec, fail=1)
    mirror(queue)
    row = DataJob.objects.get(job_id="dj1")
    assert row.state == "failed" and row.finished_at is not None
    assert (row.chunks_done, row.chunks_failed) == (1, 1)
    bad = DataJobChunk.objects.get(job=row, chunk=1)
    assert bad.state == "failed" and "bad row 'x'" in bad.error and bad.letter
    letter = jobs.status(queue, "dj1").letters[0]
    assert bad.fingerprint == mirrored.group_of(letter)
    assert json.loads(row.failures)[0].startswith("chunk 1 failed after 1 attempt")


def test_the_rows_outlive_the_record_and_read_back_as_its_status(
    queue: Queue, tmp_path: Path
) -> None:
    spec = submitted(queue, tmp_path)
    split(queue, spec)
    run_chunks(queue, spec, fail=1)
    live = jobs.status(queue, "dj1")
    mirror(queue)
    jobs.records(queue).delete("dj1")  # seven days on
    mirror(queue)
    row = DataJob.objects.get(job_id="dj1")
    assert row.state == "failed"  # as it ended: expiry changes nothing
    kept = mirrored.status_of(row, DataJobChunk.objects.filter(job=row))
    assert (kept.job_id, kept.spec, kept.state, kept.chunks, kept.reports, kept.manifest,
            kept.failures, kept.cancelled) == (
        live.job_id, live.spec, live.state, live.chunks, live.reports, live.manifest,
        live.failures, live.cancelled)
    assert [(d.id, d.error, d.attempts) for d in kept.letters] == [
        (d.id, d.error, d.attempts) for d in live.letters]
    assert [mirrored.group_of(d) for d in kept.letters] == [
        mirrored.group_of(d) for d in live.letters]


def test_a_running_job_whose_record_is_gone_is_marked_expired(
    queue: Queue, tmp_path: Path
) -> None:
    spec = submitted(queue, tmp_path)
    mirror(queue)
    jobs.records(queue).delete(spec.job_id)
    mirror(queue)
    row = DataJob.objects.get(job_id="dj1")
    assert row.state == "expired" and row.finished_at is not None


def test_a_job_no_event_showed_is_found_through_the_index(
    queue: Queue, tmp_path: Path, redis_client: Any
) -> None:
    """Its events went to another mirror, or were trimmed before any read them."""
    mirror(queue)  # the group exists: what follows is trimmed before it reads it
    submitted(queue, tmp_path, "dj1")
    submitted(queue, tmp_path, "dj2")
    redis_client.xtrim(queue.keys.events, maxlen=0)
    mirror(queue)
    assert set(DataJob.objects.values_list("job_id", flat=True)) == {"dj1", "dj2"}


def test_a_record_that_is_no_jobs_is_skipped_and_the_mirror_goes_on(
    queue: Queue, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    jobs.records(queue).create("junk", {"spec": "{not json", "created_ms": 1},
                               keep_s=60, at_ms=queue.now_ms())
    submitted(queue, tmp_path, "dj1")
    mirror(queue)
    assert list(DataJob.objects.values_list("job_id", flat=True)) == ["dj1"]
    assert caplog.text.count("data job junk of queue q not copied") == 1
    caplog.clear()
    submitted(queue, tmp_path, "dj2")
    mirror(queue)  # said once, not at every pass
    assert DataJob.objects.count() == 2 and "junk" not in caplog.text

"""A data job's page once Redis has forgotten it (issue 35): read from the database, the mirror's
copy, showing what it showed from Redis (SQL, split, chunks with Spark's bytes, failures and
their dead letters' links, manifest, EXPLAIN texts), and saying where it was read; the list of
jobs from the database by keyset, page after page, newest first. No Spark: the job's tasks are
run by hand (tests/datajobs_support.py)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.test import Client

from core.models.datajobs import DataJob
from core.pipeline import jobs
from core.queue import Queue
from tests.console_support import HOSTILE
from tests.datajobs_support import combine, run_chunks, split, submitted
from tests.mirror_support import mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]


def forget(q: Queue, job_id: str) -> None:
    """As Redis has it once the job's record and requests have expired."""
    jobs.records(q).delete(job_id)
    for rid in (job_id, jobs.combine_id(job_id)):
        q.redis.delete(q.keys.request(rid))


def part(html: str, element_id: str) -> str:
    """The element of that id (a table, a pre) as the page shows it."""
    m = re.search(rf'<(\w+)[^>]* id="{element_id}"[^>]*>.*?</\1>', html, re.S)
    assert m, f"no #{element_id} on the page"
    return m.group(0)


def test_a_done_jobs_page_shows_the_same_from_the_database_once_redis_forgot_it(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    spec = submitted(console, tmp_path)
    split(console, spec)
    jobs.records(console).put(spec.job_id, {"explain_sql": f"== Physical Plan ==\n{HOSTILE}"})
    run_chunks(console, spec)
    combine(console, spec)
    mirror(console)
    live = viewer.get("/jobs/default/dj1/").content.decode()
    assert "Read live from Redis" in part(live, "job-source")

    forget(console, "dj1")
    r = viewer.get("/jobs/default/dj1/")
    assert r.status_code == 200  # a 404 before the database kept data jobs
    kept = r.content.decode()
    assert "Read from the database" in part(kept, "job-source")
    assert 'id="job-state">done<' in kept
    for element in ("chunks", "manifest", "explain-sql", "explain-combine", "job-split"):
        assert part(kept, element) == part(live, element), element
    assert spec.sql and spec.sql in kept  # its SQL, from the spec kept
    assert 'title="1,000 bytes"' in part(kept, "chunks")  # chunk 0's input bytes
    assert HOSTILE not in kept and "&lt;script&gt;" in part(kept, "explain-sql")
    assert "by row groups into 2 chunks of 2 rows in all, planned in 0.13 s" in part(
        kept, "job-split")
    assert 'hx-trigger="every' not in kept  # a finished job's page does not poll


def test_a_failed_jobs_page_from_the_database_links_its_dead_letter_as_before(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    spec = submitted(console, tmp_path)
    split(console, spec)
    run_chunks(console, spec, fail=1)
    mirror(console)
    live = viewer.get("/jobs/default/dj1/").content.decode()
    forget(console, "dj1")
    kept = viewer.get("/jobs/default/dj1/").content.decode()
    assert 'id="job-state">failed<' in kept
    assert part(kept, "chunks") == part(live, "chunks")
    row = part(kept, "chunks").split('data-chunk="1"', 1)[1].split("</tr>", 1)[0]
    assert "/dead/" in row and "bad row" in row
    assert "chunk 1 failed after 1 attempt" in kept  # the failure line, kept


def test_a_job_neither_redis_nor_the_database_knows_is_a_404(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    submitted(console, tmp_path)  # never mirrored
    forget(console, "dj1")
    assert viewer.get("/jobs/default/dj1/").status_code == 404


def made(queue: str, n: int, *, start: datetime) -> list[DataJob]:
    spec = json.dumps({"job_id": "x", "input": "var/sample/x.parquet", "format": "parquet",
                       "output": "var/out/x", "sql": "SELECT * FROM chunk"})
    rows = [DataJob(queue=queue, job_id=f"j{i:03d}", state="done", spec=spec, chunks=2,
                    chunks_done=2, created_at=start + timedelta(seconds=i // 2),
                    finished_at=start + timedelta(seconds=i // 2 + 1), updated_at=start)
            for i in range(n)]
    return DataJob.objects.bulk_create(rows)


def test_the_list_pages_through_the_database_newest_first_without_repeats(
    console: Queue, viewer: Client
) -> None:
    made("default", 45, start=datetime(2026, 1, 1, tzinfo=UTC))  # two jobs a second
    made("other", 3, start=datetime(2026, 1, 2, tzinfo=UTC))
    seen: list[str] = []
    url = "/jobs/"
    while url:
        r = viewer.get(url)
        assert r.status_code == 200
        html = r.content.decode()
        page = re.findall(r'<tr data-job="([^"]+)"', html)
        assert len(page) <= 20
        seen += page
        nxt = r.context["paged"].next
        assert (nxt is None) == ("Next page" not in html)
        url = f"/jobs/?after={nxt}" if nxt else ""
    assert seen == [f"j{i:03d}" for i in reversed(range(45))]
    assert viewer.get("/jobs/?after=12:x").status_code == 400


def test_the_list_shows_a_job_redis_forgot_as_the_database_has_it(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    spec = submitted(console, tmp_path)
    split(console, spec)
    run_chunks(console, spec)
    combine(console, spec)
    mirror(console)
    forget(console, "dj1")
    html = viewer.get("/jobs/").content.decode()
    line = html.split('data-job="dj1"', 1)[1].split("</tr>", 1)[0]
    assert "<td>done</td>" in line and "2 / 2" in line

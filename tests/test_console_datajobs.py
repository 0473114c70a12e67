"""The console's Data jobs page (no Spark: a job's state is written as the pipeline writes it):
the list with progress per chunk, a job's SQL, chunks, manifest and the first rows of its
output, all escaped; the submit form for those allowed, checked like the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from django.test import Client

from core.pipeline import jobs
from core.pipeline.spec import make_spec
from core.queue import Queue
from tests.action_fixtures import admin, operator, viewer  # noqa: F401  (fixtures)
from tests.console_fixtures import HOSTILE, console  # noqa: F401  (fixtures)
from tests.mirror_support import mirror

pytestmark = pytest.mark.django_db


def complete_job(q: Queue, tmp_path: Path, job_id: str = "dj1") -> Any:
    """A 2-chunk job whose chunk 0 is reported, chunk 1 not yet; its output written and
    complete (parts, manifest, _SUCCESS), as the workers leave it."""
    data = tmp_path / "in.parquet"
    pd.DataFrame({"carrier": ["AA", "UA"], "n": [1, 2]}).to_parquet(data, index=False)
    spec = make_spec(job_id=job_id, input=str(data), format="parquet",
                     output=str(tmp_path / "out"), sql=f"SELECT carrier, n FROM chunk -- {HOSTILE}",
                     chunks=2)
    with pytest.warns(Warning):  # no worker announced the datajob handler
        jobs.submit(q, spec)
    key = jobs.record_key(q, job_id)
    report = {"chunk": 0, "rows_in": 1, "rows_out": 1, "seconds": 0.5, "attempt": 1,
              "worker": "w-one"}
    q.redis.hset(key, mapping={"chunks": 2, "chunk:0": json.dumps(report)})
    out = Path(spec.output)
    out.mkdir()
    pd.DataFrame({"carrier": [HOSTILE] + [f"C{i}" for i in range(30)],
                  "n": range(31)}).to_parquet(out / "part-00000.parquet", index=False)
    manifest = {"job": job_id, "rows_in": 2, "note": HOSTILE}
    (out / "_manifest.json").write_text(json.dumps(manifest))
    q.redis.hset(key, "manifest", json.dumps(manifest))
    (out / "_SUCCESS").touch()
    mirror(q)
    return spec


def test_the_list_shows_each_job_with_its_chunks_done_and_is_in_the_nav(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    complete_job(console, tmp_path)
    r = viewer.get("/jobs/")
    html = r.content.decode()
    assert r.status_code == 200
    assert 'href="/jobs/?queue=default"' in html and ">Data jobs</a>" in html
    assert 'data-job="dj1"' in html
    assert "1 / 2" in html  # chunks done of the job's chunks
    assert HOSTILE not in html and "&lt;script&gt;" in html
    assert 'name="sql"' not in html  # a viewer gets no submit form
    # The combine follow-up is the job's, not a job of its own.
    assert 'data-job="dj1.combine"' not in html


def test_a_job_page_shows_sql_chunks_manifest_and_the_first_20_rows_escaped(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    complete_job(console, tmp_path)
    r = viewer.get("/jobs/default/dj1/")
    html = r.content.decode()
    assert r.status_code == 200
    assert HOSTILE not in html
    assert "SELECT carrier, n FROM chunk" in html
    assert 'data-chunk="0"' in html and "w-one" in html and 'data-chunk="1"' in html
    assert 'id="manifest"' in html and "rows_in" in html
    preview = html.split('id="preview"', 1)[1].split("</table>", 1)[0]
    assert preview.count("<tr>") == 21  # the header and the first 20 rows
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in preview and "C18" in preview
    assert "C19" not in preview
    # The job's request is an ordinary request of the queue.
    assert viewer.get("/requests/default/dj1/").status_code == 200


def test_an_unknown_or_malformed_job_is_a_404(console: Queue, viewer: Client) -> None:
    assert viewer.get("/jobs/default/nosuchjob/").status_code == 404
    assert viewer.get("/jobs/default/a%20b/").status_code == 404
    assert viewer.get("/jobs/?after=junk").status_code == 400


def test_only_users_allowed_to_submit_see_the_form_and_may_post(
    console: Queue, viewer: Client, operator: Client, tmp_path: Path
) -> None:
    data = tmp_path / "in.parquet"
    pd.DataFrame({"carrier": ["AA"]}).to_parquet(data, index=False)
    form = {"input": str(data), "format": "parquet", "sql": "SELECT * FROM chunk",
            "output": str(tmp_path / "o"), "output_format": "csv", "chunks": "2", "views": ""}
    assert viewer.post("/jobs/submit/", form).status_code == 403
    assert 'name="sql"' in operator.get("/jobs/").content.decode()
    with pytest.warns(Warning):  # no worker announced the datajob handler
        r = operator.post("/jobs/submit/", form)
    assert r.status_code == 302
    job_id = r["Location"].split("/")[3]
    st = jobs.status(console, job_id)
    assert st.spec is not None and st.spec.chunks == 2 and st.spec.output_format == "csv"


@pytest.mark.parametrize(("change", "message"), [
    ({"input": "/nonexistent/x.parquet"}, "does not exist"),
    ({"sql": ""}, "exactly one of --sql"),
    ({"chunks": "0"}, "between 1 and"),
    ({"chunks": "many"}, "a whole number"),
    ({"views": "chunk=/tmp"}, "reserved"),
    ({"format": "xml"}, "--format"),
])
def test_the_form_refuses_what_the_cli_refuses_and_queues_nothing(
    console: Queue, operator: Client, tmp_path: Path, change: dict[str, str], message: str
) -> None:
    data = tmp_path / "in.parquet"
    pd.DataFrame({"carrier": ["AA"]}).to_parquet(data, index=False)
    form = {"input": str(data), "format": "parquet", "sql": "SELECT * FROM chunk",
            "output": str(tmp_path / "o"), "output_format": "parquet", "chunks": "",
            "views": "", **change}
    r = operator.post("/jobs/submit/", form)
    assert r.status_code == 400
    assert message in r.content.decode()
    assert console.redis.keys(f"{console.keys.prefix}*datajob*") == []

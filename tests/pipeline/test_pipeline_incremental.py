"""Incremental re-runs (issue 39, item 3): a job run again with --incremental over a folder
where one file was added reuses the last run's chunks whose files are unchanged (no task runs
for them) and computes the rest; its output equals a full run's (an aggregate, a join with a
--view, CSV, JSON and Parquet inputs); a changed SQL, view or Spark version reuses nothing;
the manifest says which chunks were reused."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.testing import assertDataFrameEqual

from core.cli.datajob import finished
from core.pipeline import incremental, jobs, plan, submission
from core.pipeline.spec import JobSpec, SpecError
from core.queue import Queue, read
from tests.pipeline_support import flights, run_worker, spec_for

AGG_SQL = ("SELECT carrier, month, sum(distance) AS dist, count(*) AS n FROM chunk "
           "GROUP BY carrier, month")
AGG_COMBINE = ("SELECT carrier, month, sum(dist) AS dist, sum(n) AS n FROM parts "
               "GROUP BY carrier, month ORDER BY carrier, month")
JOIN_SQL = ("SELECT c.carrier, p.name, count(*) AS n FROM chunk c JOIN names p "
            "ON c.carrier = p.carrier GROUP BY c.carrier, p.name")
JOIN_COMBINE = "SELECT carrier, name, sum(n) AS n FROM parts GROUP BY carrier, name"
ROWS_SQL = "SELECT id, carrier, distance FROM chunk WHERE month > 3"


def _write(df: pd.DataFrame, path: Path, fmt: str) -> None:
    if fmt == "parquet":
        df.to_parquet(path, index=False)
    elif fmt == "csv":
        df.to_csv(path, index=False)
    else:
        df.to_json(path, orient="records", lines=True)


def _folder(tmp_path: Path, fmt: str, files: int = 6, rows: int = 50) -> Path:
    folder = tmp_path / f"in-{fmt}"
    folder.mkdir()
    for i in range(files):
        df = flights(rows, seed=i)
        df["id"] += i * rows
        _write(df, folder / f"day{i:03d}.{fmt}", fmt)
    return folder


def _run(q: Queue, spec: JobSpec) -> jobs.JobStatus:
    jobs.submit(q, spec, jobs.QueueOptions(max_attempts=1))
    run_worker(q)
    st = jobs.status(q, spec.job_id)
    assert st.state == "done", st.failures
    return st


def _read(spark: Any, out: str, fmt: str = "parquet") -> Any:
    return spark.read.option("header", "true").option("inferSchema", "true") \
        .format(fmt).load(out)


@pytest.mark.parametrize("fmt", ["parquet", "csv", "json"])
def test_a_new_file_is_the_only_chunk_computed_and_the_output_equals_a_full_run(
        dq: Queue, spark_session: Any, tmp_path: Path, fmt: str) -> None:
    folder = _folder(tmp_path, fmt)
    out = tmp_path / "out"
    kw: dict[str, Any] = {"format": fmt, "output": str(out), "incremental": True}
    sql = {"sql": AGG_SQL, "combine_sql": AGG_COMBINE} if fmt != "json" else {"sql": ROWS_SQL}
    first = _run(dq, spec_for(tmp_path, folder, job_id=f"a{fmt}", chunks=2, **sql, **kw))
    assert first.manifest is not None
    assert first.manifest["reused_chunks"] == [] and first.manifest["computed_chunks"] == [0, 1]
    assert len(first.manifest["incremental"]["inputs"]) == 2
    extra = flights(40, seed=99)
    extra["id"] += 10_000
    _write(extra, folder / f"day999.{fmt}", fmt)
    again = _run(dq, spec_for(tmp_path, folder, job_id=f"b{fmt}", chunks=2, overwrite=True,
                              **sql, **kw))
    m = again.manifest
    assert m is not None
    assert m["reused_chunks"] == [0, 1] and m["computed_chunks"] == [2], m
    assert [c.get("reused", False) for c in m["chunks"]] == [True, True, False]
    said = io.StringIO()
    finished(again, said)  # what `datajob submit --wait` prints at the end
    assert f"3 chunks (2 reused from the last run) -> {out} (parquet)" in said.getvalue()
    assert [p["path"] for p in m["incremental"]["inputs"][2]] == [str(folder /
                                                                      f"day999.{fmt}")]
    # Only the new chunk ran: the split and one chunk task, then the combine.
    info = read.request(dq, f"b{fmt}")
    assert info is not None and info.total == 2
    full = _run(dq, spec_for(tmp_path, folder, job_id=f"c{fmt}", chunks=3, **sql,
                             format=fmt, output=str(tmp_path / "full")))
    assert full.manifest is not None and "reused_chunks" not in full.manifest
    assertDataFrameEqual(_read(spark_session, str(out)),
                         _read(spark_session, str(tmp_path / "full")), rtol=1e-9)
    # The last run's parts are kept beside the output (hidden), the first run's are gone.
    kept = sorted(p.name for p in (tmp_path / ".out.parts").iterdir())
    assert kept == [m["incremental"]["kept"]]
    assert not any(p.name.startswith(".") or p.name.startswith("_p") for p in out.iterdir()
                   if p.is_dir())


def test_a_join_reuses_while_its_view_is_unchanged_and_nothing_once_it_changes(
        dq: Queue, spark_session: Any, tmp_path: Path) -> None:
    folder = _folder(tmp_path, "parquet")
    names = tmp_path / "names.csv"
    names.write_text("carrier,name\nAA,American\nB6,JetBlue\nDL,Delta\nUA,United\n")
    kw: dict[str, Any] = {"sql": JOIN_SQL, "combine_sql": JOIN_COMBINE,
                          "views": {"names": str(names)}, "output": str(tmp_path / "out"),
                          "incremental": True, "chunks": 2}
    _run(dq, spec_for(tmp_path, folder, job_id="j1", **kw))
    flights(30, seed=50).to_parquet(folder / "day900.parquet", index=False)
    m = _run(dq, spec_for(tmp_path, folder, job_id="j2", overwrite=True, **kw)).manifest
    assert m is not None and m["reused_chunks"] == [0, 1] and m["computed_chunks"] == [2]
    _run(dq, spec_for(tmp_path, folder, job_id="j3", sql=JOIN_SQL,
                             combine_sql=JOIN_COMBINE, views={"names": str(names)},
                             output=str(tmp_path / "full")))
    assertDataFrameEqual(_read(spark_session, str(tmp_path / "out")),
                         _read(spark_session, str(tmp_path / "full")))
    # The view changed: every chunk is computed again, and the output follows it.
    names.write_text("carrier,name\nAA,American\nB6,JetBlue\nDL,Delta\nUA,United\nWN,SW\n")
    m = _run(dq, spec_for(tmp_path, folder, job_id="j4", overwrite=True, **kw)).manifest
    assert m is not None and m["reused_chunks"] == [] and len(m["computed_chunks"]) == 2
    got = _read(spark_session, str(tmp_path / "out")).toPandas()
    assert "SW" in set(got.name)


def test_a_changed_sql_reuses_nothing_and_a_touched_file_only_by_stat(
        dq: Queue, spark_session: Any, tmp_path: Path) -> None:
    folder = _folder(tmp_path, "parquet", files=4)
    out = str(tmp_path / "out")
    kw: dict[str, Any] = {"output": out, "incremental": True, "chunks": 2, "overwrite": True}
    _run(dq, spec_for(tmp_path, folder, job_id="s1", sql=ROWS_SQL, **kw))
    m = _run(dq, spec_for(tmp_path, folder, job_id="s2", sql=ROWS_SQL.replace("> 3", "> 4"),
                          **kw)).manifest
    assert m is not None and m["reused_chunks"] == []
    rows = _read(spark_session, out).count()
    m = _run(dq, spec_for(tmp_path, folder, job_id="s3", sql=ROWS_SQL.replace("> 3", "> 4"),
                          **kw)).manifest
    assert m is not None and m["reused_chunks"] == [0, 1] and m["computed_chunks"] == []
    assert _read(spark_session, out).count() == rows  # nothing changed, nothing lost
    # A file touched (same bytes, new time): a new identity by stat, the same by content.
    first = sorted(folder.iterdir())[0]
    os.utime(first, (1_600_000_000, 1_600_000_000))
    m = _run(dq, spec_for(tmp_path, folder, job_id="s4", sql=ROWS_SQL, content_hash=True,
                          **kw)).manifest
    assert m is not None and m["reused_chunks"] == []  # a new identity: hashes, not stats
    os.utime(first, (1_600_000_500, 1_600_000_500))
    m = _run(dq, spec_for(tmp_path, folder, job_id="s5", sql=ROWS_SQL, content_hash=True,
                          **kw)).manifest
    assert m is not None and m["reused_chunks"] == [0, 1]
    m = _run(dq, spec_for(tmp_path, folder, job_id="s6", sql=ROWS_SQL, **kw)).manifest
    assert m is not None and m["reused_chunks"] == []  # by stat: first run so identified
    os.utime(first, (1_600_000_900, 1_600_000_900))
    m = _run(dq, spec_for(tmp_path, folder, job_id="s7", sql=ROWS_SQL, **kw)).manifest
    # The untouched chunk first; the touched one's two files cut again (--chunks 2).
    assert m is not None and m["reused_chunks"] == [0] and m["computed_chunks"] == [1, 2]
    assert sorted(p["path"] for c in m["incremental"]["inputs"][1:] for p in c) == \
        [str(p) for p in sorted(folder.iterdir())[:2]]
    # A run that is not incremental replaces the output: the kept parts go with it.
    assert (tmp_path / ".out.parts").is_dir()
    _run(dq, spec_for(tmp_path, folder, job_id="s8", sql=ROWS_SQL, output=out, overwrite=True))
    assert not (tmp_path / ".out.parts").exists()


def test_the_fingerprint_follows_the_spark_version_and_the_sql(tmp_path: Path) -> None:
    spec = JobSpec(job_id="x", input=str(tmp_path), format="parquet", output=str(tmp_path / "o"),
                   sql=ROWS_SQL, incremental=True)
    a = incremental.fingerprint(spec, ROWS_SQL, "{}", "4.3.0")
    assert a == incremental.fingerprint(spec, ROWS_SQL, "{}", "4.3.0")
    assert a != incremental.fingerprint(spec, ROWS_SQL, "{}", "4.3.1")
    assert a != incremental.fingerprint(spec, ROWS_SQL + " AND id > 1", "{}", "4.3.0")
    assert a != incremental.fingerprint(spec, ROWS_SQL, '{"fields": []}', "4.3.0")


def test_incremental_options_are_checked_everywhere(tmp_path: Path) -> None:
    folder = _folder(tmp_path, "parquet", files=1)

    def refused(**kw: Any) -> str:
        with pytest.raises(SpecError) as exc:
            submission.job_spec(**{"input": str(folder), "format": "parquet", "sql": ROWS_SQL,
                                   "output": str(tmp_path / "o"), **kw})
        return str(exc.value)

    assert "--content-hash tells files apart for --incremental" in refused(content_hash=True)
    assert "does not go with --mode append" in refused(incremental=True, mode="append")
    fields = {"job_id": "sched.x.1", "input": str(folder), "format": "parquet",
              "output": str(tmp_path / "o"), "sql": ROWS_SQL}
    with pytest.raises(SpecError, match="incremental must be true or false"):
        submission.scheduled_job({**fields, "incremental": "yes"})
    spec = submission.scheduled_job({**fields, "incremental": True, "content_hash": True})
    assert spec.incremental and spec.content_hash


# -- scheduled: each slot's run through core.ops.datajobs.submit_slot, as the scheduler's --


@pytest.mark.django_db
def test_a_schedules_slots_run_incrementally_and_append_once_each(
        connect_url: str, spark_session: Any, tmp_path: Path, django_queue: Queue,
        settings: Any, prefix: str) -> None:
    from core.conf import get_queue
    from core.ops.datajobs import submit_slot
    from core.ops.schedules import checked
    from core.queue.schedule.spec import Schedule

    folder = _folder(tmp_path, "parquet", files=4)
    inc = Schedule(name="nightly", queue=django_queue.name, every_s=60, job={
        "input": str(folder), "format": "parquet", "sql": AGG_SQL, "combine_sql": AGG_COMBINE,
        "output": str(tmp_path / "agg"), "overwrite": True, "incremental": True, "chunks": 2})
    lake = Schedule(name="lake", queue=django_queue.name, every_s=60, job={
        "input": str(folder), "format": "parquet", "sql": ROWS_SQL,
        "output": str(tmp_path / "lake"), "mode": "append", "partition_by": ["carrier"]})
    # A constant output is saved with "mode": "append" (each slot adds its rows once).
    assert checked(lake, 1_700_000_000_000).job["mode"] == "append"  # type: ignore[index]

    def slot(s: Schedule, at_s: int, q: Queue) -> dict[str, Any]:
        rid = s.request_id(at_s * 1000)
        assert submit_slot(q, s, at_s * 1000, rid)
        run_worker(q)
        st = jobs.status(q, rid)
        assert st.state == "done" and st.manifest is not None, st.failures
        return st.manifest

    assert slot(inc, 1000, django_queue)["computed_chunks"] == [0, 1]
    flights(30, seed=77).to_parquet(folder / "day100.parquet", index=False)
    m = slot(inc, 1060, django_queue)
    assert m["reused_chunks"] == [0, 1] and m["computed_chunks"] == [2]
    assert _read(spark_session, str(tmp_path / "agg")).toPandas().n.sum() == 4 * 50 + 30

    rows_one = slot(lake, 1000, django_queue)["rows_out"]
    slot(lake, 1060, django_queue)
    assert _read(spark_session, str(tmp_path / "lake")).count() == 2 * rows_one
    # Slot 1000 again (its requests gone: another prefix): its rows replace its own.
    settings.QUEUE_PREFIX = prefix + "again"
    m = slot(lake, 1000, get_queue(django_queue.name))
    assert [r["job"] for r in m["runs"]] == ["sched.lake.1060", "sched.lake.1000"]
    assert _read(spark_session, str(tmp_path / "lake")).count() == 2 * rows_one


def test_a_csv_file_that_widens_a_column_reuses_nothing_and_equals_a_full_run(
        dq: Queue, spark_session: Any, tmp_path: Path) -> None:
    """The split infers a CSV's columns over the new files alone when they infer as the last
    run's did; a new file whose `distance` holds a fraction widens the column for every file,
    as Spark's inference over the whole input does: the fingerprint changes."""
    folder = _folder(tmp_path, "csv", files=4)
    kw: dict[str, Any] = {"format": "csv", "sql": ROWS_SQL, "incremental": True,
                          "overwrite": True, "chunks": 2, "output": str(tmp_path / "out")}
    _run(dq, spec_for(tmp_path, folder, job_id="w1", **kw))
    same = flights(20, seed=60)
    same["id"] += 5_000
    _write(same, folder / "day100.csv", "csv")
    spec = spec_for(tmp_path, folder, job_id="w2", **kw)
    listing = plan.list_input(spec)
    assert listing is not None
    assert incremental.known_frame(spark_session, spec, listing) is not None  # the last run's
    m = _run(dq, spec).manifest
    assert m is not None and m["reused_chunks"] == [0, 1] and m["computed_chunks"] == [2]
    wide = flights(20, seed=61).astype({"distance": "float64"})
    wide["id"] += 6_000
    wide.loc[0, "distance"] = 1234.5
    _write(wide, folder / "day101.csv", "csv")
    spec = spec_for(tmp_path, folder, job_id="w3", **kw)
    listing = plan.list_input(spec)
    assert listing is not None
    assert incremental.known_frame(spark_session, spec, listing) is None  # inferred afresh
    m = _run(dq, spec).manifest
    assert m is not None and m["reused_chunks"] == []
    full = str(tmp_path / "full")
    _run(dq, spec_for(tmp_path, folder, job_id="w4", format="csv", sql=ROWS_SQL, output=full))
    got, want = _read(spark_session, str(tmp_path / "out")), _read(spark_session, full)
    assert dict(got.dtypes)["distance"] == "double"
    assertDataFrameEqual(got, want)

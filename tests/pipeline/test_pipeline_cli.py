"""`manage.py datajob`: every refusal before anything is queued (none needs Spark: a submit
starts no JVM; the SQL is checked against the input's columns read from its files' metadata),
and a job followed to its end, done or failed, with `show` printing its manifest."""

from __future__ import annotations

import getpass
import io
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError

from core.cli.datajob import build_spec, cancel, clean, follow, show, submit
from core.pipeline import jobs
from core.pipeline.check import make_spec
from core.queue import Queue, read
from core.queue.errors import UnknownHandlerWarning
from core.stack.redis_server import RedisServer
from tests.conftest import keys_under
from tests.pipeline_support import flights, run_worker
from tests.stack_support import migrated_sqlite

ROOT = Path(__file__).resolve().parents[2]
# A submit, a cancel and a clean each write their audit entry.
pytestmark = pytest.mark.django_db


def refused(**kw: Any) -> str:
    with pytest.raises(CommandError) as exc:
        build_spec(**{"format": "parquet", "sql": "SELECT * FROM chunk", **kw})
    return str(exc.value)


def test_refusals_before_anything_is_queued(
    tmp_path: Path, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    data = tmp_path / "in.parquet"
    flights(20).to_parquet(data)
    out = tmp_path / "out"
    msg = refused(input=str(tmp_path / "nope.parquet"), output=str(out))
    assert "input" in msg and "does not exist" in msg
    msg = refused(input=str(tmp_path / "*.csv"), output=str(out), format="csv")
    assert "matches no file" in msg
    msg = refused(input=str(data), output=str(out), sql=None, transform="no_such")
    assert "--transform 'no_such' is not registered" in msg and "QA_HANDLER_MODULES" in msg
    msg = refused(input=str(data), output=str(out), views=["planes"])
    assert "expected NAME=PATH" in msg
    msg = refused(input=str(data), output=str(out), views=["chunk=" + str(data)])
    assert "reserved" in msg
    msg = refused(input=str(data), output=str(out), views=[f"planes={tmp_path}/planes.parquet"])
    assert "--view planes=" in msg and "no such file" in msg
    msg = refused(input=str(data), output=str(out), chunks=0)
    assert "--chunks 0" in msg
    msg = refused(input="/etc/passwd", output=str(out), format="csv")
    assert msg.startswith("data job refused: input '/etc/passwd' is not under a data root: ")
    msg = refused(input=str(data), output=str(out / ("x" * 256)))
    assert msg.startswith("data job refused: --output: the name 'xxxx") and \
        "is longer than 255 bytes, the most a file name may have" in msg
    big = "SELECT carrier FROM chunk WHERE carrier IN (" + ",".join(["'AA'"] * 14_000) + ")"
    msg = refused(input=str(data), output=str(out), sql=big)
    assert msg == f"data job refused: --sql is {len(big):,} bytes; at most 64 KiB"
    half = "SELECT carrier FROM chunk WHERE carrier IN (" + ",".join(["'AA'"] * 7_000) + ")"
    msg = refused(input=str(data), output=str(out), sql=half,
                  combine_sql=half.replace("FROM chunk", "FROM parts"))
    assert msg.startswith("data job refused: the job's SQL, combine SQL and paths take ")
    assert "bytes together; at most 60 KiB" in msg
    out.mkdir()
    (out / "_SUCCESS").touch()
    (out / "_manifest.json").write_text(json.dumps({"job": "old1", "finished_at": "then"}))
    msg = refused(input=str(data), output=str(out))
    assert "already complete" in msg and "job old1" in msg and "--overwrite" in msg
    (out / "_SUCCESS").unlink()
    for overwrite in (False, True):  # not a data job's complete output: never replaced
        msg = refused(input=str(data), output=str(out), overwrite=overwrite)
        assert f"output {out} exists and was not written by a data job" in msg, msg
    assert keys_under(redis_client, prefix) == []  # nothing queued


def test_a_file_given_in_the_wrong_format_is_refused_as_such(
    tmp_path: Path, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    # Read as a CSV header, its first bytes were once named to the user as its columns.
    data = tmp_path / "in.parquet"
    flights(20).to_parquet(data)
    out = str(tmp_path / "out")
    for fmt in ("csv", "json"):
        msg = refused(input=str(data), output=out, format=fmt, sql="SELECT carrier FROM chunk")
        assert msg == (f"data job refused: {data} is a Parquet file, not {fmt} "
                       "(give --format parquet)")
    disguised = tmp_path / "planes.csv"
    disguised.write_bytes(data.read_bytes())
    msg = refused(input=str(data), output=out, views=[f"planes={disguised}"])
    assert msg == (f"data job refused: {disguised} is a Parquet file, not csv (a --view's "
                   "format comes from its name: .csv, .json, else Parquet)")
    binary = tmp_path / "blob.csv"
    binary.write_bytes(b"a,b\n\x00\x01\x02")
    msg = refused(input=str(binary), output=out, format="csv", sql="SELECT a FROM chunk")
    assert msg == (f"data job refused: {binary} is not text (it holds NUL bytes), so not csv: "
                   "is --format right?")
    text = tmp_path / "flights.csv"
    flights(5).to_csv(text, index=False)
    msg = refused(input=str(text), output=out, format="parquet", sql="SELECT carrier FROM chunk")
    assert msg == (f"data job refused: {text} is text, not Parquet (give --format csv or "
                   "--format json)")
    assert keys_under(redis_client, prefix) == []  # nothing queued


def test_without_format_the_inputs_name_gives_it(tmp_path: Path) -> None:
    data = tmp_path / "in.csv"
    flights(5).to_csv(data, index=False)
    # Read as CSV (its header's columns), not as Parquet, though --format was not given.
    with pytest.raises(CommandError, match=r"--sql names `nope`, which the data does not have "
                                           r"\(columns of the input: id, carrier, month,"):
        call_command("datajob", "submit", "--input", str(data), "--output",
                     str(tmp_path / "o"), "--sql", "SELECT nope FROM chunk")


@pytest.mark.parametrize("how", [[], ["--sql", "SELECT 1 FROM chunk", "--transform", "t"]])
def test_datajob_command_needs_exactly_one_of_sql_and_transform(
    tmp_path: Path, how: list[str]
) -> None:
    # core.pipeline.submission's words, not argparse's: the console's form says the same.
    with pytest.raises(CommandError, match=r"give exactly one of --sql .* and --transform NAME"):
        call_command("datajob", "submit", "--input", "x", "--format", "parquet",
                     "--output", str(tmp_path / "o"), *how)


def test_datajob_command_checks_queue_options_first(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="--priority must be between 0 and 99, got 100"):
        call_command("datajob", "submit", "--input", "x", "--format", "parquet",
                     "--output", str(tmp_path / "o"), "--sql", "SELECT 1", "--priority", "100")


@pytest.mark.parametrize(("sql", "combine", "want"), [
    ("SELEC carrier FROM chunk", None, "--sql does not parse"),
    ("SELECT carrier, dep_dely FROM chunk", None, "--sql names `dep_dely`, which the data"),
    ("SELECT carrier FROM chunk", "SELECT avg(dep_delay) FROM parts",
     "--combine-sql names `dep_delay`"),
])
def test_sql_is_checked_against_the_input_schema(
    flights_parquet: tuple[Path, pd.DataFrame], tmp_path: Path,
    sql: str, combine: str | None, want: str,
) -> None:
    path, _ = flights_parquet
    with pytest.raises(CommandError) as exc:
        build_spec(input=str(path), format="parquet", output=str(tmp_path / "o"), sql=sql,
                   combine_sql=combine)
    message = str(exc.value)
    assert message.startswith("data job refused:") and want in message, message
    if "dep_dely" in sql:
        assert "(columns of the input: id, carrier, month, dep_delay, distance)" in message


def test_a_submit_checks_and_queues_a_job_without_starting_spark(
    tmp_path: Path, redis_server: RedisServer, redis_client: redis.Redis, prefix: str
) -> None:
    """`manage.py datajob submit` as a person runs it: the job is checked (its SQL against
    the input's columns), queued and audited with the OS user as its actor, and the process
    never imports PySpark (no JVM, no Spark Connect session)."""
    data = tmp_path / "in.csv"
    flights(20).to_csv(data, index=False)
    script = ("import sys, django; django.setup()\n"
              "from django.core.management import call_command\n"
              "call_command('datajob', *sys.argv[1:])\n"
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))\n"
              # Nor the workers' handler modules (the pipeline's tasks): only a --transform
              # job needs them, to find its transform (they took 0.1-0.3 s of every submit).
              "print(sorted(m for m in sys.modules if m in ('core.pipeline.tasks', "
              "'core.pipeline.chunk', 'core.pipeline.combine', 'core.worker.registry')))")
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "queueadmin.settings",
                        "REDIS_URL": redis_server.url, "QUEUE_PREFIX": prefix,
                        "SECRET_KEY": "cli-tests", "QA_VAR_DIR": str(tmp_path / "var")}
    env.pop("DATABASE_URL", None)  # the audit log in var/db.sqlite3, as `make run` makes it
    (tmp_path / "var").mkdir()
    migrated_sqlite(tmp_path / "var" / "db.sqlite3")  # as migrate makes it
    done = subprocess.run(
        [sys.executable, "-c", script, "submit", "--input", str(data), "--format", "csv",
         "--sql", "SELECT carrier, count(*) AS n FROM chunk GROUP BY carrier",
         "--output", str(tmp_path / "o"), "--request-id", "nospark1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["nospark1", "[]", "[]"]
    st = jobs.status(Queue(redis_client, "default", prefix=prefix), "nospark1")
    assert st.state == "running" and st.spec is not None and st.spec.input == str(data)
    with sqlite3.connect(tmp_path / "var" / "db.sqlite3") as db:
        rows = db.execute("SELECT actor, source, action, target, acted FROM core_auditentry"
                          ).fetchall()
    assert rows == [(f"os:{getpass.getuser()}", "cli", "datajob",
                     f"data job nospark1: {data} -> {tmp_path / 'o'}", 1)]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_a_job_followed_to_its_end_and_its_manifest_shown(
    connect_url: str, tmp_path: Path, django_queue: Queue, fmt: str
) -> None:
    data = tmp_path / f"flights.{fmt}"
    if fmt == "csv":
        flights(300).to_csv(data, index=False)
    else:
        flights(300).to_parquet(data, index=False)
    spec = build_spec(input=str(data), format=fmt, output=str(tmp_path / "o"),
                      output_format="csv", sql="SELECT carrier, count(*) AS n FROM chunk "
                      "GROUP BY carrier", combine_sql="SELECT carrier, sum(n) AS n FROM parts "
                      "GROUP BY carrier ORDER BY carrier", chunks=2, request_id="cli1")
    out, err = io.StringIO(), io.StringIO()
    submit(spec, stdout=out, stderr=err)
    assert out.getvalue() == "cli1\n"
    assert "no worker of queue 'default' runs data jobs yet" in err.getvalue()
    run_worker(django_queue)
    printed = io.StringIO()
    st = follow(django_queue, "cli1", timeout=10, stdout=printed)
    text = printed.getvalue()
    rows_in = dict(re.findall(r"^chunk (\d): (\S+) rows in", text, re.M))
    # A Parquet file's rows are known from its footer (one row group: cut by rows); a CSV is
    # cut into byte ranges whose rows are not counted.
    if fmt == "parquet":
        assert rows_in == {"0": "150", "1": "150"}, text
        assert "done: 300 rows in, 5 rows out, 2 chunks" in text
    else:
        assert rows_in == {"0": "?", "1": "?"}, text
        assert "done: ? rows in, 5 rows out, 2 chunks" in text
    lines = (tmp_path / "o").glob("part-*.csv")
    [part] = list(lines)
    assert part.read_text().splitlines()[0] == "carrier,n"
    assert sum(pd.read_csv(part)["n"]) == 300  # every row, once
    shown = io.StringIO()
    show("cli1", stdout=shown)
    assert json.loads(shown.getvalue()) == st.manifest
    assert st.manifest is not None
    assert st.manifest["split"] == ("byte ranges" if fmt == "csv" else "rows")
    shown = io.StringIO()
    show(str(tmp_path / "o"), stdout=shown)
    assert json.loads(shown.getvalue())["job"] == "cli1"
    # Submitting the same output again is refused: complete already.
    with pytest.raises(CommandError, match="already complete"):
        build_spec(input=str(data), format=fmt, output=str(tmp_path / "o"),
                   sql="SELECT 1 FROM chunk")
    out = io.StringIO()
    cancel("cli1", wait_s=1, stdout=out)
    assert out.getvalue().splitlines() == [
        "data job cli1: nothing to cancel (finished or cancelled already)",
        "data job cli1 is done: its output stays, and it left no staging"]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_a_failed_job_exits_non_zero_saying_which_chunk_and_why(
    connect_url: str, tmp_path: Path, django_queue: Queue, fmt: str
) -> None:
    data = tmp_path / f"in.{fmt}"
    if fmt == "json":
        data.write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n{"a": 4}\n')
    else:
        pd.DataFrame({"a": [1, 2, 3, 4]}).to_parquet(data, index=False)
    spec = build_spec(input=str(data), format=fmt, output=str(tmp_path / "o"),
                      sql="SELECT a, raise_error('a is ' || a) AS boom FROM chunk WHERE a = 4",
                      chunks=2, request_id="bad1")
    # Three attempts allowed, one spent: raise_error() refuses the row again on every run.
    submit(spec, options=jobs.QueueOptions(max_attempts=3), stdout=io.StringIO(),
           stderr=io.StringIO())
    run_worker(django_queue)
    with pytest.raises(CommandError) as exc:
        follow(django_queue, "bad1", timeout=10, stdout=io.StringIO())
    message = str(exc.value)
    assert "data job bad1 failed: no _SUCCESS was written" in message
    assert "chunk 1 failed after 1 attempt" in message and "a is 4" in message
    assert "requeue --request bad1" in message and "datajob cancel bad1" in message
    assert not (tmp_path / "o" / "_SUCCESS").exists()
    shown = io.StringIO()
    show("bad1", stdout=shown)
    summary = json.loads(shown.getvalue())
    assert summary["state"] == "failed" and summary["chunks_done"] == [0]
    # Cancelled (its request has ended, failed: the cancel ends its held combine step), then
    # its dead letter requeued: the chunk does not run again for a combine that never comes.
    cancel("bad1", wait_s=5, stdout=io.StringIO())
    assert django_queue.state("bad1.combine") == "cancelled" and not spec.staging.exists()
    [letter] = read.request_dead_letters(django_queue, "bad1")
    assert django_queue.requeue([letter.id]) == (1, 0)
    run_worker(django_queue)
    [again] = read.request_dead_letters(django_queue, "bad1")
    assert again.error.endswith("chunk 1 of job bad1 not run: the job was cancelled (its "
                                "combine step is); submit it again to run it"), again.error
    assert again.attempts == 1 and not spec.staging.exists()


def _quiet_submit(spec: Any) -> str:
    out = io.StringIO()
    submit(spec, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.parametrize(("taken", "job_id", "what"), [
    ("X", "X", "request X already exists in queue 'default' and is not a data job "
               "(it is a request of handler 'noop', active)"),
    ("X.combine", "X", "request X.combine already exists in queue 'default' and is not the "
                       "combine step of data job X"),
    ("other.combine", "other.combine",
     "request other.combine already exists in queue 'default' and is not a data job (it is "
     "the follow-up of request other, held)"),
])
def test_a_job_id_that_is_another_requests_id_is_refused_with_nothing_written(
    tmp_path: Path, django_queue: Queue, redis_client: redis.Redis, prefix: str,
    taken: str, job_id: str, what: str,
) -> None:
    data = tmp_path / "in.parquet"
    flights(20).to_parquet(data)
    if taken == "other.combine":  # another data job's combine step
        other = make_spec(job_id="other", input=str(data), format="parquet",
                          output=str(tmp_path / "other"), sql="SELECT * FROM chunk")
        _quiet_submit(other)
    else:  # a plain request, as `manage.py submit --request-id` makes it
        call_command("submit", '{"a": 1}', handler="noop", any_handler=True,
                     request_id=taken, stdout=io.StringIO(), stderr=io.StringIO())
    before = {k: redis_client.dump(k) for k in keys_under(redis_client, prefix)}
    spec = make_spec(job_id=job_id, input=str(data), format="parquet",
                     output=str(tmp_path / "o"), sql="SELECT * FROM chunk")
    with pytest.raises(CommandError) as exc:
        _quiet_submit(spec)
    message = str(exc.value)
    assert message.startswith("data job refused: --request-id"), message
    assert what in message and "choose another job id" in message
    # Nothing was written: no record, no combine follow-up, no split task.
    assert {k: redis_client.dump(k) for k in keys_under(redis_client, prefix)} == before


def call_command_from_argv(argv: list[str], err: io.StringIO) -> None:
    """The command as `manage.py` runs it: a CommandError becomes a message and exit 1."""
    from core.management.commands.datajob import Command

    Command(stderr=err).run_from_argv(["manage.py", *argv])


def test_the_command_refuses_a_taken_id_with_a_message_and_no_traceback(
    tmp_path: Path, django_queue: Queue
) -> None:
    data = tmp_path / "in.parquet"
    flights(20).to_parquet(data)
    call_command("submit", '{"a": 1}', handler="noop", any_handler=True, request_id="X",
                 stdout=io.StringIO(), stderr=io.StringIO())
    err = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command_from_argv(["datajob", "submit", "--input", str(data), "--format",
                                "parquet", "--output", str(tmp_path / "o"), "--sql",
                                "SELECT * FROM chunk", "--request-id", "X"], err)
    assert exited.value.code == 2  # bad input: the id is taken
    said = err.getvalue()
    assert said.startswith("CommandError: data job refused: --request-id 'X': request X "
                           "already exists in queue 'default' and is not a data job"), said
    assert "Traceback" not in said
    assert django_queue.state("X") == "active"


def test_the_same_job_submitted_again_changes_nothing(
    tmp_path: Path, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    data = tmp_path / "in.parquet"
    flights(20).to_parquet(data)
    spec = make_spec(job_id="same1", input=str(data), format="parquet",
                     output=str(tmp_path / "o"), sql="SELECT * FROM chunk")
    assert _quiet_submit(spec) == "same1\n"
    before = {k: redis_client.dump(k) for k in keys_under(redis_client, prefix)
              if not k.endswith((":events", ":stats"))}
    assert _quiet_submit(spec) == "same1 (submitted before: nothing changed)\n"
    after = {k: redis_client.dump(k) for k in keys_under(redis_client, prefix)
             if not k.endswith((":events", ":stats"))}
    assert after == before


def staged(spec: Any, files: int = 3, size: int = 1000) -> int:
    """Staging data as chunks and a combine step leave it: parts/ (each chunk's part) and
    out/ (the output being written); its bytes."""
    for k in range(files):
        part = spec.part_dir(k)
        part.mkdir(parents=True, exist_ok=True)
        (part / "part-0.parquet").write_bytes(b"x" * size)
        out = spec.staging / "out"
        out.mkdir(parents=True, exist_ok=True)
        (out / f"part-{k:05d}-0.parquet").write_bytes(b"x" * size)
    return files * 2 * size


def job_in(tmp_path: Path, job_id: str, **options: Any) -> Any:
    data = tmp_path / "in.parquet"
    if not data.exists():
        flights(20).to_parquet(data)
    spec = make_spec(job_id=job_id, input=str(data), format="parquet",
                     output=str(tmp_path / f"out-{job_id}"), sql="SELECT * FROM chunk")
    with warnings.catch_warnings():  # no worker announced the datajob handler
        warnings.simplefilter("ignore", UnknownHandlerWarning)
        jobs.submit(jobs_queue(), spec, jobs.QueueOptions(**options))
    return spec


def jobs_queue() -> Queue:
    from core.conf import get_queue

    return get_queue("default")


@pytest.mark.django_db
def test_cancel_removes_the_staging_once_nothing_runs_and_clean_finishes_what_it_left(
    tmp_path: Path, django_queue: Queue
) -> None:
    q = django_queue
    running = job_in(tmp_path, "run1")
    [lease] = q.dequeue("w-busy", count=1)  # its split, running on a worker
    size = staged(running)
    idle = job_in(tmp_path, "idle1")
    staged(idle)

    # Nothing of idle1 runs: cancelled at once, its staging gone.
    out = io.StringIO()
    cancel("idle1", wait_s=5, stdout=out)
    assert out.getvalue().splitlines() == [
        "data job idle1 cancelled",
        f"data job idle1: removed its staging {idle.staging} (6,000 bytes)"]
    assert not idle.staging.exists()
    assert q.state("idle1") == "cancelled" and q.state("idle1.combine") == "cancelled"

    # run1's split does not stop within the wait: its staging stays, and it says so.
    out = io.StringIO()
    started = time.monotonic()
    cancel("run1", wait_s=0.5, stdout=out)
    assert 0.5 <= time.monotonic() - started < 5
    said = out.getvalue()
    assert "data job run1 cancelled" in said
    assert "1 task still stopping; its workers remove its staging" in said
    assert "datajob clean" in said
    assert running.staging.exists()
    assert q.state("run1") == "cancelling" and q.state("run1.combine") == "cancelled"
    out = io.StringIO()
    clean(stdout=out)  # still running: not touched
    assert running.staging.exists()
    assert "removed 0 staging directories" in out.getvalue()

    q.ack(lease)  # the split stops (as a worker releases a cancelled task)
    assert q.state("run1") == "cancelled"
    out = io.StringIO()
    clean(dry_run=True, stdout=out)
    assert out.getvalue().splitlines() == [
        f"would remove {running.staging} (data job run1, cancelled, {size:,} bytes)",
        f"would remove 1 staging directory, {size:,} bytes, in queue default; nothing done"]
    assert running.staging.exists()
    out = io.StringIO()
    clean(stdout=out)
    assert out.getvalue().splitlines()[0] == (
        f"removed {running.staging} (data job run1, cancelled, {size:,} bytes)")
    assert not running.staging.exists()
    # Cancelling again changes nothing and says so.
    out = io.StringIO()
    cancel("run1", wait_s=0, stdout=out)
    assert out.getvalue().splitlines() == [
        "data job run1: nothing to cancel (finished or cancelled already)",
        "data job run1: no staging left"]


@pytest.mark.django_db
def test_clean_never_touches_a_running_held_or_failed_job_but_removes_an_expired_ones(
    tmp_path: Path, django_queue: Queue
) -> None:
    q = django_queue
    failed = job_in(tmp_path, "failed1", max_attempts=1)
    [lease] = q.dequeue("w-1", count=1)
    q.fail(lease, "boom")  # the split's only attempt: a dead letter
    assert jobs.status(q, "failed1").state == "failed"
    waiting = job_in(tmp_path, "waiting1")  # queued, nothing run yet; its combine held
    active = job_in(tmp_path, "active1")
    q.dequeue("w-2", count=1)
    gone = job_in(tmp_path, "gone1")
    for spec in (failed, waiting, active, gone):
        staged(spec)
    # gone1's requests expired (their retention is shorter than its record's).
    for rid in ("gone1", "gone1.combine"):
        q.redis.delete(q.keys.request(rid), q.keys.tasks(rid))
    assert jobs.status(q, "gone1").state == "expired"
    out = io.StringIO()
    removed = clean(stdout=out)
    assert [c.job_id for c in removed] == ["gone1"]
    assert not gone.staging.exists()
    for spec in (failed, waiting, active):
        assert spec.staging.exists(), spec.job_id
    assert out.getvalue().splitlines()[-1] == (
        "removed 1 staging directory, 6,000 bytes, in queue default")
    # A failed job's message offers `datajob cancel`: it ends the held combine step and
    # removes the staging that was kept for a requeue.
    out = io.StringIO()
    cancel("failed1", wait_s=1, stdout=out)
    assert out.getvalue().splitlines()[-1].startswith(
        f"data job failed1: removed its staging {failed.staging}")
    assert not failed.staging.exists()
    assert q.state("failed1.combine") == "cancelled"


def test_cancel_of_what_is_no_data_job_is_refused(django_queue: Queue) -> None:
    call_command("submit", '{"a": 1}', handler="noop", any_handler=True, request_id="plain1",
                 stdout=io.StringIO(), stderr=io.StringIO())
    for job_id in ("plain1", "nosuch"):
        with pytest.raises(CommandError, match=f"no data job '{job_id}' in queue 'default'"):
            cancel(job_id, stdout=io.StringIO())
    assert django_queue.state("plain1") == "active"


def test_a_job_whose_requests_expired_runs_again_when_submitted_again(
    tmp_path: Path, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    data = tmp_path / "in.parquet"
    flights(20).to_parquet(data)
    spec = make_spec(job_id="again1", input=str(data), format="parquet",
                     output=str(tmp_path / "o"), sql="SELECT * FROM chunk")
    assert _quiet_submit(spec) == "again1\n"
    for rid in ("again1", "again1.combine"):
        django_queue.cancel(rid)
    for k in keys_under(redis_client, prefix):  # what their retention's expiry does
        if ":req:again1" in k and redis_client.pttl(k) > 0:
            redis_client.delete(k)
    assert jobs.status(django_queue, "again1").request is None
    assert redis_client.exists(django_queue.keys.record(jobs.RECORD_KIND, "again1"))
    assert _quiet_submit(spec) == "again1\n"  # a new run, said as such
    st = jobs.status(django_queue, "again1")
    assert st.state == "running" and st.request is not None and st.request.total == 1


def test_ctrl_c_while_following_says_the_job_goes_on_and_how_to_stop_it(
    django_queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # what Ctrl-C raises in the waiting loop

    monkeypatch.setattr(jobs, "wait", interrupted)
    with pytest.raises(CommandError) as refused:
        follow(django_queue, "j9", stdout=io.StringIO())
    assert str(refused.value) == (
        "stopped following data job j9; the job goes on running: `manage.py datajob show j9` "
        "follows it up, `manage.py datajob cancel j9` stops it")


def test_a_job_runs_as_many_chunks_at_once_as_the_setting_says_unless_it_asks(
    tmp_path: Path, settings: Any, django_queue: Queue
) -> None:
    """QA_DATAJOB_CONCURRENCY (by default the embedded Spark's cores): more chunks of one job at
    once than Spark has cores only makes each slower; a job's --concurrency wins."""
    from core.queue import read

    settings.DATAJOB_CONCURRENCY = 2
    job_in(tmp_path, "conc-default")
    job_in(tmp_path, "conc-asked", concurrency=5)
    info = {j: read.request(django_queue, j) for j in ("conc-default", "conc-asked")}
    assert {j: i.concurrency if i else None for j, i in info.items()} == {
        "conc-default": 2, "conc-asked": 5}


def test_without_an_audit_log_a_submit_and_a_clean_do_nothing(
    tmp_path: Path, redis_server: RedisServer, redis_client: redis.Redis, prefix: str
) -> None:
    """A command that could leave no audit entry (a database never migrated) does nothing,
    and says how to make the log."""
    data = tmp_path / "in.csv"
    flights(20).to_csv(data, index=False)
    env = os.environ | {"DJANGO_SETTINGS_MODULE": "queueadmin.settings",
                        "REDIS_URL": redis_server.url, "QUEUE_PREFIX": prefix,
                        "SECRET_KEY": "cli-tests", "QA_VAR_DIR": str(tmp_path / "var")}
    env.pop("DATABASE_URL", None)  # var/db.sqlite3, which nobody migrated
    for action, argv in (("datajob", ["submit", "--input", str(data), "--format", "csv",
                                      "--sql", "SELECT * FROM chunk", "--output",
                                      str(tmp_path / "o"), "--request-id", "nolog1"]),
                         ("datajob-clean", ["clean"])):
        done = subprocess.run([sys.executable, "manage.py", "datajob", *argv], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stderr
        assert f"{action}: nothing done: the audit log cannot be written" in done.stderr
        assert "manage.py migrate" in done.stderr and "Traceback" not in done.stderr
    assert keys_under(redis_client, prefix) == []

"""A data job reads and writes under the data roots only, and its SQL reads only the job's own
views: every way out (an absolute path, `..`, a symbolic link to a file or inside a directory
input, a glob, Hadoop's glob alternatives that Spark expands to `..` in an input, a view, an
output or the name of a file in a directory input, the stack's private var/, a --view, an
output outside the output roots or equal to one, an output that no data job wrote) and every
SQL construct that reaches beyond the
job's data (a path-qualified table, reflect() and its kin, TRANSFORM ... USING, a table
function, DDL and DML, SET, ADD JAR, two statements, `${...}`) is refused three times over:

- by `datajob submit` ("data job refused: ...", exit 1, nothing queued);
- by the console's form (400, the message at the field it is about, nothing queued);
- by the worker, for a task written into Redis by hand as someone with access to Redis could
  write it (dead-lettered at its first attempt with "... of job J refused: ...", before Spark
  opens anything), and nothing outside the roots is read or written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils.html import escape

from core.models import AuditEntry
from core.pipeline import check, io, jobs, plan, step
from core.pipeline.check import make_spec
from core.pipeline.errors import DataJobError
from core.pipeline.spec import JobSpec, SpecError
from core.queue import Queue, read
from core.queue.models import DeadLetter
from tests.conftest import keys_under
from tests.pipeline_support import run_worker

CANARY = "secret,n\nCANARY-S3CRET,1\n"


@dataclass
class Place:
    """A test's folders: `tmp` under the data roots (inputs data.csv and data.parquet, a
    symbolic link innocent.csv and a directory lake/ holding one, both leading to the
    canary), `out` the only output root (with someone's folder mine/ that no data job wrote,
    and a link escape/ leading outside), `var` the stack's var/ (its secret key), and
    `outside`, a folder outside every root that holds canary.csv."""

    tmp: Path
    out: Path
    var: Path
    outside: Path
    base: Path  # the run's data root (tests/conftest.py data_roots)
    canary_mtime: int = 0

    def fill(self, text: str) -> str:
        """`text` with {tmp}, {out}, {var}, {outside}, {base}, {up} (`..` steps from tmp to
        outside), {braced_up} (the same steps as Hadoop's glob alternatives, `.{./,x/}.`
        each, which Spark expands to `../.`) and {pond_up} (from tmp/pond, `{.,x/}.` each)
        replaced."""
        for name, value in (("tmp", self.tmp), ("out", self.out), ("var", self.var),
                            ("outside", self.outside), ("base", self.base),
                            ("up", self.up(self.tmp)),
                            ("braced_up", braced(self.up(self.tmp), ".{./,x/}.")),
                            ("pond_up", braced(self.up(self.tmp / "pond"), "{.,x/}."))):
            text = text.replace("{" + name + "}", str(value))
        return text

    def up(self, start: Path) -> str:
        return os.path.relpath(self.outside, start)

    def outside_state(self) -> dict[str, bytes]:
        return {str(p.relative_to(self.outside)): (p.read_bytes() if p.is_file() else b"")
                for p in sorted(self.outside.rglob("*"))}

    def assert_untouched(self, *, outputs: bool = True) -> None:
        """Nothing appeared outside the roots, the canary, the secret key and someone's
        folder out/mine are as they were; with `outputs`, no output or staging either."""
        assert self.outside_state() == {"canary.csv": CANARY.encode()}
        assert os.stat(self.outside / "canary.csv").st_mtime_ns == self.canary_mtime
        assert (self.var / "secret_key").read_text() == "s3cret"
        assert [p.name for p in (self.out / "mine").iterdir()] == ["notes.txt"]
        assert (self.out / "mine" / "notes.txt").read_text() == "mine"
        if outputs:
            assert sorted(p.name for p in self.out.iterdir()) == ["escape", "mine"]


def braced(up: str, dotdot: str) -> str:
    """`up` (`../../x`) with each `..` written as Hadoop's glob alternatives that Spark expands
    to `..` (and to a folder that is not there): one folder name after another to Python."""
    return "/".join(dotdot if part == ".." else part for part in up.split("/"))


def decoy(start: Path, up: str, text: str) -> Path:
    """The file that the braced path `start/up/canary.csv` names as the text it is: a real
    file under the roots, as a job's output written there would be (its folder names hold
    the braces), which the checks see while Spark reads the canary."""
    path = start / up / "canary.csv"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


@pytest.fixture
def place(tmp_path: Path, settings: Any, data_roots: Path) -> Iterator[Place]:
    outside = Path(tempfile.mkdtemp(prefix="qa-outside-")).resolve()
    assert not outside.is_relative_to(data_roots), "the canary must lie outside the roots"
    try:
        (outside / "canary.csv").write_text(CANARY)
        tmp = tmp_path.resolve()
        (tmp / "data.csv").write_text("a,b\n1,2\n3,4\n")
        pd.DataFrame({"a": [1, 3], "b": [2, 4]}).to_parquet(tmp / "data.parquet", index=False)
        (tmp / "innocent.csv").symlink_to(outside / "canary.csv")
        (tmp / "lake").mkdir()
        (tmp / "lake" / "part-0.csv").write_text("a,b\n5,6\n")
        (tmp / "lake" / "part-1.csv").symlink_to(outside / "canary.csv")
        (tmp / "elsewhere").mkdir()  # under a data root, but no output root
        var = tmp / "var"
        for d in ("sample", "data", "out"):
            (var / d).mkdir(parents=True)
        (var / "secret_key").write_text("s3cret")
        out = tmp / "out"
        out.mkdir()
        (out / "escape").symlink_to(outside)
        (out / "mine").mkdir()  # someone's folder: no data job wrote it
        (out / "mine" / "notes.txt").write_text("mine")
        # Decoys whose folder names hold Hadoop's glob alternatives: under tmp (a view's), and
        # inside the directory input tmp/pond, beside a plain part.
        decoy(tmp, braced(os.path.relpath(outside, tmp), ".{./,x/}."), "a,b\n7,8\n")
        (tmp / "pond").mkdir()
        (tmp / "pond" / "part-0.csv").write_text("a,b\n5,6\n")
        decoy(tmp / "pond", braced(os.path.relpath(outside, tmp / "pond"), "{.,x/}."),
              "a,b\n7,8\n")
        # The stack's var/ is this test's (its secret key private even under a data root that
        # holds it); tmp/out is the only output root. In-process workers read the same settings.
        settings.VAR_DIR = var
        settings.OUTPUT_ROOTS = [str(out)]
        yield Place(tmp, out, var, outside, data_roots.resolve(),
                    os.stat(outside / "canary.csv").st_mtime_ns)
    finally:
        shutil.rmtree(outside, ignore_errors=True)


@dataclass(frozen=True)
class Case:
    """A job that tries a way out, and what its refusal says (with Place.fill's names)."""

    says: str
    field: str  # the console form's field the refusal is about
    input: str = "{tmp}/data.csv"
    views: tuple[tuple[str, str], ...] = ()
    output: str = "{out}/result"
    sql: str = "SELECT a, b FROM chunk"
    combine_sql: str | None = None
    overwrite: bool = False

    def options(self, place: Place) -> dict[str, Any]:
        """The job as keyword arguments of build_spec / make_spec (paths filled in)."""
        return {"input": place.fill(self.input), "format": "csv",
                "output": place.fill(self.output), "sql": place.fill(self.sql),
                "combine_sql": None if self.combine_sql is None else place.fill(self.combine_sql),
                "views": {n: place.fill(p) for n, p in self.views},
                "overwrite": self.overwrite}

    def argv(self, place: Place) -> list[str]:
        o = self.options(place)
        argv = ["submit", "--input", o["input"], "--format", "csv", "--output", o["output"],
                "--sql", o["sql"]]
        if o["combine_sql"] is not None:
            argv += ["--combine-sql", o["combine_sql"]]
        for name, path in o["views"].items():
            argv += ["--view", f"{name}={path}"]
        return argv + (["--overwrite"] if o["overwrite"] else [])

    def form(self, place: Place) -> dict[str, str]:
        o = self.options(place)
        form = {"input": o["input"], "format": "csv", "sql": o["sql"], "transform": "",
                "combine_sql": o["combine_sql"] or "", "output": o["output"],
                "output_format": "parquet", "chunks": "", "rows_per_chunk": "",
                "priority": "", "concurrency": "", "tenant": "", "max_attempts": "",
                "request_id": "",
                "views": "\r\n".join(f"{n}={p}" for n, p in o["views"].items())}
        return form | ({"overwrite": "on"} if o["overwrite"] else {})

    def spec(self, place: Place, job_id: str) -> dict[str, Any]:
        """The job as a task's payload carries it, unchecked and unresolved: as someone who
        writes into Redis would."""
        o = self.options(place)
        return JobSpec(job_id=job_id, input=o["input"], format="csv", output=o["output"],
                       sql=o["sql"], combine_sql=o["combine_sql"], views=o["views"],
                       overwrite=o["overwrite"]).to_dict()


ROOTS = "{base}, {out} (QA_DATA_ROOTS or QA_OUTPUT_ROOTS)"
WAYS_OUT = {
    "absolute path": Case(
        f"input '/etc/passwd' is not under a data root: {ROOTS}", "input", input="/etc/passwd"),
    "dot-dot": Case(
        f"input '{{tmp}}/{{up}}/canary.csv' is not under a data root: {ROOTS}", "input",
        input="{tmp}/{up}/canary.csv"),
    "symlink to a file": Case(
        "input '{tmp}/innocent.csv' (it resolves to {outside}/canary.csv) is not under a data "
        "root", "input", input="{tmp}/innocent.csv"),
    "symlink inside a directory": Case(
        "input '{tmp}/lake' holds {tmp}/lake/part-1.csv, a symbolic link to "
        "{outside}/canary.csv, which is outside the data roots (Spark would read it)", "input",
        input="{tmp}/lake"),
    "glob reaching out": Case(
        "input '{tmp}/{up}/*.csv' (it resolves to {outside}) is not under a data root",
        "input", input="{tmp}/{up}/*.csv"),
    "glob matching a symlink": Case(
        "input '{tmp}/lake/*.csv' (it resolves to {outside}/canary.csv) is not under a data "
        "root", "input", input="{tmp}/lake/*.csv"),
    "var secret key": Case(
        "input '{var}/secret_key' is inside the stack's private folder {var} (its keys and "
        "database)", "input", input="{var}/secret_key"),
    "var through its data folder": Case(
        "input '{var}/sample/../secret_key' is inside the stack's private folder {var}",
        "input", input="{var}/sample/../secret_key"),
    "view outside": Case(
        f"--view p '/etc/passwd' is not under a data root: {ROOTS}", "views",
        views=(("p", "/etc/passwd"),)),
    "view through a symlink": Case(
        "--view p '{tmp}/innocent.csv' (it resolves to {outside}/canary.csv) is not under a "
        "data root", "views", views=(("p", "{tmp}/innocent.csv"),)),
    "view in var": Case(
        "--view p '{var}/secret_key' is inside the stack's private folder {var}", "views",
        views=(("p", "{var}/secret_key"),)),
    "output outside": Case(
        "--output '{outside}/x' is not inside an output root: {out} (QA_OUTPUT_ROOTS)",
        "output", output="{outside}/x", overwrite=True),
    "output in a data root only": Case(
        "--output '{tmp}/elsewhere/x' is not inside an output root: {out} (QA_OUTPUT_ROOTS)",
        "output", output="{tmp}/elsewhere/x"),
    "output equal to an output root": Case(
        "--output '{out}' is an output root itself: give a folder inside it: {out} "
        "(QA_OUTPUT_ROOTS)", "output", output="{out}", overwrite=True),
    "output through a symlink": Case(
        "--output '{out}/escape/x' (it resolves to {outside}/x) is not inside an output root",
        "output", output="{out}/escape/x", overwrite=True),
    "output in var": Case(
        "--output '{var}/x' is inside the stack's private folder {var}", "output",
        output="{var}/x"),
    # Hadoop's glob syntax: Spark expands a path's {a,b/c} before reading it (issue 33, 4)
    "view through glob alternatives": Case(
        "--view p '{tmp}/{braced_up}/canary.csv' holds '{', which Spark reads as a pattern",
        "views", views=(("p", "{tmp}/{braced_up}/canary.csv"),)),
    "input through glob alternatives": Case(
        "input '{tmp}/{braced_up}/canary.csv' holds '{', which Spark reads as a pattern",
        "input", input="{tmp}/{braced_up}/canary.csv"),
    "a directory input holding a name with glob alternatives": Case(
        "input '{tmp}/pond' holds {tmp}/pond/{.,x, whose name has '{': Spark is given each "
        "file of an input by name", "input", input="{tmp}/pond"),
    "output with glob alternatives": Case(
        "--output '{out}/.{./,x/}./x' holds '{', which Spark reads as a pattern", "output",
        output="{out}/.{./,x/}./x"),
    "input with brackets": Case(
        "input '{tmp}/data.[c]sv' holds '[', which Spark reads as a pattern", "input",
        input="{tmp}/data.[c]sv"),
    "input with a backslash": Case(
        "input '{tmp}/data\\\\.csv' holds '\\', which Spark reads as a pattern", "input",
        input="{tmp}/data\\.csv"),
    "input with a wildcard in a folder's name": Case(
        "input '{tmp}/*/part-0.csv': a wildcard (* or ?) may stand in the path's last part "
        "only (such as data/*.parquet), not in a folder's name ('*')", "input",
        input="{tmp}/*/part-0.csv"),
    "view with a wildcard": Case(
        "--view p '{tmp}/*.csv' holds '*', which Spark reads as a pattern", "views",
        views=(("p", "{tmp}/*.csv"),)),
}

FORBIDDEN_SQL = {
    "parquet path": Case(
        "--sql reads parquet.`/etc/passwd`: a job's SQL reads only its own views (chunk); a "
        "file is given with --input or --view NAME=PATH, not in the SQL", "sql",
        sql="SELECT * FROM parquet.`/etc/passwd`"),
    "text path": Case(
        "--sql reads text.`{outside}/canary.csv`: a job's SQL reads only its own views", "sql",
        sql="SELECT * FROM text.`{outside}/canary.csv`"),
    "reflect": Case(
        "--sql calls reflect(), which a job's SQL may not use", "sql",
        sql="SELECT a, reflect('java.lang.System', 'getenv', 'HOME') AS h FROM chunk"),
    "java_method": Case(
        "--sql calls java_method(), which a job's SQL may not use", "sql",
        sql="SELECT java_method('java.lang.System', 'getProperty', 'user.home') AS h "
            "FROM chunk"),
    "try_reflect": Case(
        "--sql calls try_reflect(), which a job's SQL may not use", "sql",
        sql="SELECT try_reflect('java.lang.Runtime', 'getRuntime') AS r FROM chunk"),
    "transform using": Case(
        "--sql uses TRANSFORM ... USING (it runs a program on the server), which a job's SQL "
        "may not", "sql", sql="SELECT TRANSFORM(a) USING 'cat /etc/passwd' AS (x) FROM chunk"),
    "read_files": Case(
        "--sql reads from READ_FILES('/etc'): a job's SQL reads only its own views (chunk), "
        "not table functions", "sql", sql="SELECT * FROM read_files('/etc')"),
    "range": Case(
        "--sql reads from RANGE(10): a job's SQL reads only its own views (chunk), not table "
        "functions", "sql", sql="SELECT * FROM range(10)"),
    "insert": Case(
        "--sql is INSERT: a job's SQL is one query (SELECT, or WITH ... SELECT, or a UNION of "
        "them) over the job's own views", "sql",
        sql="INSERT OVERWRITE DIRECTORY '{outside}/x' SELECT * FROM chunk"),
    "create view": Case("--sql is CREATE: a job's SQL is one query", "sql",
                        sql="CREATE TEMPORARY VIEW v AS SELECT 1"),
    "create function": Case("--sql is CREATE: a job's SQL is one query", "sql",
                            sql="CREATE TEMPORARY FUNCTION f AS 'x.Y'"),
    "drop": Case("--sql is DROP: a job's SQL is one query", "sql", sql="DROP TABLE chunk"),
    "set": Case("--sql is SET: a job's SQL is one query", "sql",
                sql="SET spark.sql.ansi.enabled = false"),
    "add jar": Case("--sql is a command: a job's SQL is one query", "sql",
                    sql="ADD JAR {outside}/evil.jar"),
    "two statements": Case("--sql holds 2 statements: give one query", "sql",
                           sql="SELECT a FROM chunk; DROP TABLE chunk"),
    "substitution": Case(
        "--sql uses a ${...} substitution (it reads the server's configuration), which a "
        "job's SQL may not", "sql", sql="SELECT a FROM chunk WHERE b = ${env:HOME}"),
    "substitution as a column": Case(
        "--sql does not parse: ", "sql",
        sql="SELECT ${spark.driver.extraJavaOptions} AS x FROM chunk"),
    "combine reflect": Case(
        "--combine-sql calls reflect(), which a job's SQL may not use", "combine_sql",
        combine_sql="SELECT reflect('java.lang.System', 'getenv', 'HOME') AS h FROM parts"),
    "combine path": Case(
        "--combine-sql reads text.`/etc/passwd`: a job's SQL reads only its own views (parts)",
        "combine_sql", combine_sql="SELECT * FROM text.`/etc/passwd`"),
}
EVERY_CASE = {**WAYS_OUT, **FORBIDDEN_SQL}
cases = pytest.mark.parametrize("case", EVERY_CASE.values(), ids=EVERY_CASE.keys())


# -- the CLI ---------------------------------------------------------------------------------


@cases
def test_datajob_submit_refuses_it_and_queues_nothing(
    case: Case, place: Place, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    with pytest.raises(CommandError) as refused:
        call_command("datajob", *case.argv(place))
    said = str(refused.value)
    assert said.startswith("data job refused: "), said
    assert place.fill(case.says) in said, said
    assert keys_under(redis_client, prefix) == []
    place.assert_untouched()


def test_overwrite_replaces_no_folder_a_data_job_did_not_write(
    place: Place, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    from core.cli.datajob import build_spec

    mine = place.out / "mine"
    with pytest.raises(CommandError) as refused:
        build_spec(input=str(place.tmp / "data.csv"), format="csv", output=str(mine),
                   sql="SELECT a FROM chunk", overwrite=True)
    assert str(refused.value).startswith(
        f"data job refused: output {mine} exists and was not written by a data job (no "
        "_SUCCESS and _manifest.json there"), str(refused.value)
    assert "--overwrite only replaces a data job's complete output" in str(refused.value)
    # A _SUCCESS alone is no data job's output either.
    (mine / "_SUCCESS").touch()
    with pytest.raises(CommandError, match="exists and was not written by a data job"):
        build_spec(input=str(place.tmp / "data.csv"), format="csv", output=str(mine),
                   sql="SELECT a FROM chunk", overwrite=True)
    (mine / "_SUCCESS").unlink()
    assert keys_under(redis_client, prefix) == []
    place.assert_untouched()


# -- what Spark reads: Hadoop's glob alternatives ---------------------------------------------


@pytest.mark.parametrize("name", ["view through glob alternatives",
                                  "a directory input holding a name with glob alternatives"])
def test_glob_alternatives_lead_spark_out_of_the_roots_and_every_check_refuses_them(
    name: str, place: Place, spark_session: Any
) -> None:
    """Issue 33, item 4. A path that is a plain folder under the roots to Python (its names
    hold `{`, `,` and `}`) is expanded by Spark's reader to `..`: Spark, given it, reads the
    canary outside every root. So the job is refused by the submit's check (the form, the CLI,
    a schedule's save and firing) and by the worker's (a task from Redis), and the worker
    gives Spark no file named so, whatever its listing found."""
    case = WAYS_OUT[name]
    if case.views:
        given = [place.fill(case.views[0][1])]
    else:  # the split's listing of the folder, whose files Spark is then given by name
        listed = plan.list_input(JobSpec.from_dict(case.spec(place, "j")))
        assert listed is not None
        given = [f for f in listed.files if "{" in f]
    assert len(given) == 1 and Path(given[0]).read_text() == "a,b\n7,8\n"  # what Python sees
    read = spark_session.read.option("header", "true").csv(given).collect()
    assert [tuple(r) for r in read] == [("CANARY-S3CRET", "1")]  # what Spark reads
    says = place.fill(case.says)
    with pytest.raises(SpecError) as submit:
        make_spec(job_id="j", **case.options(place))
    assert says in str(submit.value)
    with pytest.raises(SpecError) as worker:
        check.confine(JobSpec.from_dict(case.spec(place, "j")))
    assert says in str(worker.value)
    if not case.views:
        spec = JobSpec.from_dict(case.spec(place, "j"))
        with pytest.raises(SpecError, match="whose name Spark would read as a pattern"):
            check.read_paths(spec, given)
        with pytest.raises(DataJobError, match="whose name Spark would read as a pattern"):
            io.read_input(spark_session, spec, given)
    place.assert_untouched()


# -- the console's form -----------------------------------------------------------------------


def marked_field(html: str) -> str:
    """The form's label marked invalid (the field and its message)."""
    marked = re.search(r'<label class="[^"]*invalid[^"]*">.*?</label>', html, re.S)
    assert marked is not None, html[-3000:]
    return marked.group(0)


@pytest.mark.django_db
@cases
def test_the_console_form_refuses_it_at_its_field_and_queues_nothing(
    case: Case, place: Place, console: Queue, operator: Client
) -> None:
    before = sorted(console.redis.keys(f"{console.keys.prefix}*"))
    r = operator.post("/jobs/submit/", case.form(place))
    html = r.content.decode()
    assert r.status_code == 400
    assert "Not submitted: the field marked below needs changing." in html
    label = marked_field(html)
    assert f'name="{case.field}"' in label and 'aria-invalid="true"' in label
    assert escape(place.fill(case.says)) in label, label
    assert sorted(console.redis.keys(f"{console.keys.prefix}*")) == before  # nothing queued
    assert not AuditEntry.objects.filter(action="datajob").exists()
    place.assert_untouched()


@pytest.mark.django_db
def test_the_console_form_replaces_no_folder_a_data_job_did_not_write(
    place: Place, console: Queue, operator: Client
) -> None:
    form = Case("", "output", output="{out}/mine", overwrite=True).form(place)
    before = sorted(console.redis.keys(f"{console.keys.prefix}*"))
    r = operator.post("/jobs/submit/", form)
    label = marked_field(r.content.decode())
    assert r.status_code == 400 and 'name="output"' in label
    assert escape(f"output {place.out / 'mine'} exists and was not written by a data job") \
        in label
    assert sorted(console.redis.keys(f"{console.keys.prefix}*")) == before
    place.assert_untouched()


# -- the worker, for tasks written into Redis by hand ---------------------------------------


@pytest.fixture
def jobq(redis_client: redis.Redis, prefix: str, connect_url: str) -> Queue:
    """A queue of this test on the suite's Redis (the server's clock: the worker's leases run
    in real time), with the run's Spark Connect server behind its workers."""
    return Queue(redis_client, "data", prefix=prefix)


@pytest.fixture
def sessions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The tasks for which the worker opened a Spark session (anything Spark reads or writes
    goes through one), by where they ran ("the split of job J")."""
    opened: list[str] = []
    real = step.sparking

    def spy(spec: JobSpec, payload: dict[str, Any], ctx: Any) -> Any:
        opened.append(step._where(spec, payload))
        return real(spec, payload, ctx)

    monkeypatch.setattr(step, "sparking", spy)
    return opened


def only_letter(q: Queue, request_id: str) -> DeadLetter:
    letters = read.request_dead_letters(q, request_id)
    assert len(letters) == 1, [d.error for d in letters]
    return letters[0]


def legit_job(q: Queue, place: Place, job_id: str) -> JobSpec:
    """A job that passed every check, submitted; its split leased and acked by hand (no
    chunk added): the job's chunk request stays open for tasks an attacker adds."""
    spec = make_spec(job_id=job_id, input=str(place.tmp / "data.csv"), format="csv",
                     output=str(place.out / "result"), sql="SELECT * FROM chunk")
    jobs.submit(q, spec, jobs.QueueOptions(max_attempts=3))
    [split] = q.dequeue("w-forger", count=1)
    q.ack(split)
    return spec


@pytest.mark.slow
@cases
def test_a_forged_split_task_is_dead_lettered_at_once_and_nothing_is_read(
    case: Case, place: Place, jobq: Queue, sessions: list[str]
) -> None:
    """A split task written straight into Redis, its spec unchecked: the worker checks it
    again, and refuses it before Spark reads anything, on its first attempt of three."""
    jobq.submit([{"op": "split", "job": "forged1", "spec": case.spec(place, "forged1")}],
                handler=jobs.HANDLER, request_id="forged1", max_attempts=3)
    run_worker(jobq)
    letter = only_letter(jobq, "forged1")
    assert letter.attempts == 1
    assert f"the split of job forged1 refused: {place.fill(case.says)}" in letter.error, \
        letter.error
    assert sessions == []
    place.assert_untouched()


@pytest.mark.slow
@pytest.mark.parametrize("case", [WAYS_OUT["absolute path"], WAYS_OUT["view through a symlink"],
                                  WAYS_OUT["output outside"], FORBIDDEN_SQL["reflect"],
                                  FORBIDDEN_SQL["combine path"]],
                         ids=["input", "view", "output", "sql", "combine sql"])
def test_a_chunk_task_of_a_job_whose_record_was_rewritten_is_refused(
    case: Case, place: Place, jobq: Queue, sessions: list[str]
) -> None:
    """A chunk task takes its job's spec from the job's record in Redis: a record rewritten
    after the submit (its "spec" field) is checked again by the chunk and refused."""
    legit_job(jobq, place, "j1")
    jobq.redis.hset(jobq.keys.record(jobs.RECORD_KIND, "j1"), "spec",
                    json.dumps(case.spec(place, "j1")))
    jobq.add("j1", [{"op": "chunk", "job": "j1", "chunk": 0,
                     "read": {"files": [str(place.tmp / "data.csv")]}}])
    jobq.seal("j1")
    run_worker(jobq)
    letter = only_letter(jobq, "j1")
    assert letter.attempts == 1
    assert f"chunk 0 of job j1 refused: {place.fill(case.says)}" in letter.error, letter.error
    assert sessions == []
    assert jobs.status(jobq, "j1").state == "failed"
    place.assert_untouched()


@pytest.mark.slow
def test_a_forged_combine_task_is_refused(place: Place, jobq: Queue, sessions: list[str]) -> None:
    """The combine step carries its spec too: one whose output lies outside the output roots
    (with --overwrite) is refused before anything is moved or removed."""
    case = WAYS_OUT["output outside"]
    jobq.submit([{"op": "combine", "job": "forged2", "spec": case.spec(place, "forged2")}],
                handler=jobs.HANDLER, request_id="forged2", max_attempts=3)
    run_worker(jobq)
    letter = only_letter(jobq, "forged2")
    assert letter.attempts == 1
    assert f"the combine of job forged2 refused: {place.fill(case.says)}" in letter.error
    assert sessions == []
    place.assert_untouched()


@pytest.mark.slow
@pytest.mark.parametrize("where", ["payload", "record"])
def test_a_chunk_task_whose_read_names_a_file_outside_the_roots_is_refused(
    place: Place, jobq: Queue, where: str
) -> None:
    """A chunk's read (the slice of the input the split planned for it) travels in its
    payload, or in the job's record when big: one naming a file outside the roots is refused
    before Spark reads it, and nothing of that file reaches the job's part."""
    legit_job(jobq, place, "j2")
    read = {"files": [str(place.outside / "canary.csv")], "known_rows": 1}
    if where == "payload":
        jobq.add("j2", [{"op": "chunk", "job": "j2", "chunk": 0, "read": read}])
    else:
        jobq.redis.hset(jobq.keys.record(jobs.RECORD_KIND, "j2"), "read:0", json.dumps(read))
        jobq.add("j2", [{"op": "chunk", "job": "j2", "chunk": 0}])
    jobq.seal("j2")
    run_worker(jobq)
    leaked = [str(p) for p in place.out.rglob("*.parquet") if holds_canary(p)]
    assert leaked == []
    letter = only_letter(jobq, "j2")
    assert letter.attempts == 1 and "chunk 0 of job j2 refused: " in letter.error, letter.error


def holds_canary(part: Path) -> bool:
    """Whether a Parquet file a task wrote holds the canary's secret."""
    return "CANARY-S3CRET" in pd.read_parquet(part).to_csv()


@pytest.mark.slow
def test_a_job_id_that_leads_the_staging_out_of_the_roots_is_refused(
    place: Place, jobq: Queue
) -> None:
    """A job's staging lies next to its output, named after the job: a record whose spec
    (its paths all under the roots) has a job id with `/` and `..` in it, which would put
    the staging outside the roots, is refused, and nothing is written there."""
    legit_job(jobq, place, "j3")
    forged = Case("", "").spec(place, place.fill("j3/../../{up}/x"))
    jobq.redis.hset(jobq.keys.record(jobs.RECORD_KIND, "j3"), "spec", json.dumps(forged))
    jobq.add("j3", [{"op": "chunk", "job": "j3", "chunk": 0,
                     "read": {"files": [str(place.tmp / "data.csv")], "known_rows": 2}}])
    jobq.seal("j3")
    run_worker(jobq)
    place.assert_untouched(outputs=False)
    letter = only_letter(jobq, "j3")
    assert letter.attempts == 1 and "chunk 0 of job j3 refused: " in letter.error, letter.error


@pytest.mark.slow
def test_the_combine_replaces_no_folder_a_data_job_did_not_write(
    place: Place, jobq: Queue
) -> None:
    """A job submitted with --overwrite while its output was free; someone's folder appears
    there before the job ends: the combine leaves it as it is and the job fails, at once,
    saying why (--overwrite replaces only a data job's own output)."""
    target = place.out / "later"
    spec = make_spec(job_id="j4", input=str(place.tmp / "data.parquet"), format="parquet",
                     output=str(target), sql="SELECT a, b FROM chunk", overwrite=True)
    jobs.submit(jobq, spec, jobs.QueueOptions(max_attempts=3))
    target.mkdir()
    (target / "notes.txt").write_text("not a data job's")
    run_worker(jobq)
    letter = only_letter(jobq, "j4.combine")
    assert letter.attempts == 1
    assert (f"the combine step of job j4: {target} exists and is not a data job's output "
            "that --overwrite may replace; nothing was changed there") in letter.error
    assert [p.name for p in target.iterdir()] == ["notes.txt"]
    assert (target / "notes.txt").read_text() == "not a data job's"
    assert jobs.status(jobq, "j4").state == "failed"
    place.assert_untouched(outputs=False)


@pytest.mark.slow
def test_a_substitution_inside_a_string_is_not_replaced_by_sparks_configuration(
    place: Place, jobq: Queue
) -> None:
    """The SQL check refuses `${...}` (it reads the server's configuration): hidden in a
    string literal, it is either refused too, or left as the text it is."""
    sql = ("SELECT a, '${spark.app.name}' AS conf, '${env:HOME}' AS env, "
           "'${system:user.name}' AS prop FROM chunk")
    try:
        spec = make_spec(job_id="j5", input=str(place.tmp / "data.parquet"),
                         format="parquet", output=str(place.out / "subst"), sql=sql)
    except SpecError as exc:  # refused: as good as left alone
        assert "${" in str(exc)
        return
    jobs.submit(jobq, spec)
    run_worker(jobq)
    assert jobs.status(jobq, "j5").state == "done"
    got = pd.concat(pd.read_parquet(p) for p in sorted((place.out / "subst").glob("*.parquet")))
    assert set(got["conf"]) == {"${spark.app.name}"}
    assert set(got["env"]) == {"${env:HOME}"}
    assert set(got["prop"]) == {"${system:user.name}"}

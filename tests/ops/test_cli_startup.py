"""A command-line tool answers at once (STYLE.md): a command imports what it uses, when it
uses it. `submit` and `queuestat`, run for real, never import the data pipeline or sqlglot
(nor the console's views, which Django's system checks would import through the URLconf);
no command's `--help` imports a heavy module; a data job submitted again over the same file
imports neither pyarrow nor sqlglot. Each runs in a fresh interpreter with
`python -X importtime`, which lists every module imported, so a top-level import added to any
module on a command's way fails here; the thirty commands' `--help` in processes forked from
one that set Django up (tests/forked_commands.py), whose modules are read at their end."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import get_commands

from core.queue import Queue, handlers
from core.stack.redis_server import RedisServer
from tests.forked_commands import Forker
from tests.stack_support import migrated_sqlite

ROOT = Path(__file__).resolve().parents[2]
IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", re.M)
# What only a data job's checks (sqlglot, file metadata), its Spark, the console's pages, the
# HTTP API (django-ninja and pydantic: the URLconf's, not an installed app) or tracing need.
HEAVY = ("core.pipeline", "sqlglot", "pandas", "pyarrow", "numpy", "pyspark", "core.views",
         "ninja", "pydantic", "opentelemetry")
# What redis-py tries to import for its own metrics, answered "not installed" by the engine
# (core/queue/redispy.py): listed by -X importtime, never loaded.
TRIED = frozenset({"opentelemetry.sdk.metrics", "opentelemetry.metrics"})


def imported(args: list[str], drop: tuple[str, ...] = (), **env: str,
             ) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run `manage.py ARGS` (without the variables `drop`); the process, and every module it
    imported."""
    base = {k: v for k, v in os.environ.items()
            if k not in ("REDIS_URL", "QUEUE_PREFIX", "PYTHONIMPORTTIME", *drop)}
    done = subprocess.run([sys.executable, "-X", "importtime", "manage.py", *args], cwd=ROOT,
                          env={**base, **env}, capture_output=True, text=True, timeout=120)
    return done, set(IMPORTED.findall(done.stderr))


def heavy(modules: set[str], *, allowed: frozenset[str] = frozenset()) -> list[str]:
    return sorted(m for m in modules - allowed - TRIED
                  if any(m == h or m.startswith(f"{h}.") for h in HEAVY))


def test_imported_reads_what_a_command_imports() -> None:
    """The probe itself: a command that uses the pipeline is seen to import it."""
    done, modules = imported(["datajob", "submit", "--input", "/nonexistent/x.csv", "--sql",
                              "SELECT * FROM chunk", "--output", "/nonexistent/out"])
    assert done.returncode == 2, done.stderr
    assert {"core.pipeline.submission", "django", "core.cli.datajob"} <= modules


def test_submit_imports_neither_the_pipeline_nor_sqlglot(
    redis_server: RedisServer, prefix: str
) -> None:
    handlers.announce(Queue.from_url(redis_server.url, "default", prefix=prefix), "w1", ["noop"])

    done, modules = imported(["submit", '{"n": 1}', "--handler", "noop", "--request-id", "s1"],
                             REDIS_URL=redis_server.url, QUEUE_PREFIX=prefix)

    assert (done.returncode, done.stdout) == (0, "s1\n"), done.stderr
    assert heavy(modules) == []
    assert not any(m.startswith("rich") for m in modules)  # the progress bar is --wait's


def test_queuestat_imports_neither_the_pipeline_nor_sqlglot(
    redis_server: RedisServer, prefix: str
) -> None:
    done, modules = imported(["queuestat"], REDIS_URL=redis_server.url, QUEUE_PREFIX=prefix)

    assert done.returncode == 0, done.stderr
    assert "queue stats" in done.stdout
    assert heavy(modules) == []


COMMANDS = sorted(name for name, app in get_commands().items() if app == "core")


def test_every_command_of_the_project_is_covered() -> None:
    assert {"submit", "queuestat", "datajob", "runworker", "runstack", "schedule"} <= set(
        COMMANDS)


@pytest.fixture(scope="module")
def forker() -> Iterator[Forker]:
    """Commands in processes forked from one that set Django up (tests/forked_commands.py),
    in the environment `imported` gives them."""
    f = Forker({k: v for k, v in os.environ.items()
                if k not in ("REDIS_URL", "QUEUE_PREFIX", "PYTHONIMPORTTIME")})
    yield f
    f.stop()


def test_a_forked_command_is_seen_to_import_what_it_uses(forker: Forker) -> None:
    """The forked probe itself: the modules of a command that uses the pipeline, and not
    those of the server's setup alone."""
    done = forker.run("datajob", "submit", "--input", "/nonexistent/x.csv", "--sql",
                      "SELECT * FROM chunk", "--output", "/nonexistent/out")
    assert done.returncode == 2, done.stderr
    assert {"core.pipeline.submission", "django", "core.cli.datajob"} <= done.modules
    assert "core.cli.datajob" not in forker.run("queuestat", "--help").modules


@pytest.mark.parametrize("command", COMMANDS)
def test_a_commands_help_imports_nothing_heavy(forker: Forker, command: str) -> None:
    """Each in a process forked after Django's setup (~0.05 s, not a cold start's ~0.45 s):
    its modules are those of the setup, which every command does first, and the command's
    own. Cold starts of real commands are measured above."""
    args = [command, "submit", "--help"] if command == "datajob" else [command, "--help"]
    done = forker.run(*args)
    modules = set(done.modules)

    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
    # A data job's command may name its defaults (core.pipeline.jobs: no sqlglot, no Spark).
    allowed = frozenset({"core.pipeline", "core.pipeline.jobs", "core.pipeline.spec",
                         "core.pipeline.errors", "core.pipeline.unique_output",
                         "core.pipeline.reports"}
                        if command == "datajob" else ())
    assert heavy(modules, allowed=allowed) == []


def test_a_data_job_submitted_again_over_the_same_file_imports_neither_pyarrow_nor_sqlglot(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    """The first submit reads the file's columns (pyarrow) and checks the SQL (sqlglot); the
    next, of the same job over the same file, is answered by what the first kept
    (core/pipeline/checkcache.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": ["x", "y"], "b": [1, 2]}), data)
    # Its audit entry goes to a SQLite database of its own, also when the suite runs on
    # PostgreSQL (a fresh checkout has no var/db.sqlite3).
    migrated_sqlite(tmp_path / "var" / "db.sqlite3")
    env = {"REDIS_URL": redis_server.url, "QUEUE_PREFIX": prefix, "SECRET_KEY": "cli-tests",
           "QA_VAR_DIR": str(tmp_path / "var"), "QA_CHECK_CACHE": str(tmp_path / "kept")}

    runs = []
    for n in range(2):
        done, modules = imported(
            ["datajob", "submit", "--input", str(data), "--format", "parquet",
             "--sql", "SELECT a, sum(b) AS total FROM chunk GROUP BY a",
             "--output", str(tmp_path / f"out{n}"), "--request-id", f"job{n}"],
            drop=("DATABASE_URL",), **env)
        assert (done.returncode, done.stdout) == (0, f"job{n}\n"), done.stderr
        runs.append(modules)

    assert {"sqlglot", "pyarrow"} <= runs[0]
    assert "core.pipeline.check" in runs[1]
    assert heavy(runs[1], allowed=frozenset(m for m in runs[1] if m.startswith(
        "core.pipeline"))) == []


@pytest.mark.parametrize(("args", "status"), [(["help"], 0), (["submit", "{"], 2)])
def test_a_command_leaves_its_objects_to_the_process_exit_and_still_runs_atexit(
        args: list[str], status: int) -> None:
    """queueadmin.main.run (manage.py's, the script's) freezes the objects a command made on
    its way out, so the interpreter's teardown skips collecting them; the atexit handlers
    (logging's, tracing's flush) still run, and the exit status is the command's."""
    code = ("import atexit, gc, sys\n"
            "atexit.register(lambda: print('atexit: frozen', gc.get_freeze_count() > 0))\n"
            f"sys.argv = ['manage.py', *{args!r}]\n"
            "from queueadmin.main import run\n"
            "run()\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)

    assert done.returncode == status, done.stderr
    assert done.stdout.endswith("atexit: frozen True\n")

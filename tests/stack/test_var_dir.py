"""QA_VAR_DIR is made when something first keeps state there (the database, the secret key),
not when the settings are read: a command that keeps nothing (help, submit, queuestat) leaves
no var/ behind in the directory it ran in, and `migrate` in a new one makes it, private to
its user."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.stack.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]


def manage(var_dir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items()
            if k not in ("DATABASE_URL", "SECRET_KEY", "REDIS_URL", "QUEUE_PREFIX")}
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT,
                          env={**base, "QA_VAR_DIR": str(var_dir), **env},
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [["help"], ["queuestat", "--help"], ["datajob", "--help"]])
def test_a_command_that_keeps_nothing_makes_no_var_dir(tmp_path: Path, args: list[str]) -> None:
    done = manage(tmp_path / "site" / "var", *args)

    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "site").exists()


def test_submit_and_queuestat_make_no_var_dir(
    tmp_path: Path, redis_server: RedisServer, prefix: str
) -> None:
    env = {"REDIS_URL": redis_server.url, "QUEUE_PREFIX": prefix}
    submitted = manage(tmp_path / "site" / "var", "submit", "1", "--handler", "noop",
                       "--any-handler", **env)
    stats = manage(tmp_path / "site" / "var", "queuestat", "--json", **env)

    assert submitted.returncode == 0 and stats.returncode == 0, submitted.stderr + stats.stderr
    assert not (tmp_path / "site").exists()


def test_migrate_in_a_new_var_dir_makes_it_private(tmp_path: Path) -> None:
    var = tmp_path / "site" / "var"

    done = manage(var, "migrate", "-v", "0")

    assert done.returncode == 0, done.stderr
    assert var.stat().st_mode & 0o777 == 0o700
    assert (var / "db.sqlite3").is_file()
    assert not (var / "secret_key").exists()  # made when something first signs with it
    made = manage(var, "createuser", "alice", "--role", "viewer")
    assert made.returncode == 0 and "created viewer 'alice'" in made.stdout, made.stderr


def test_a_var_dir_that_cannot_be_made_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")

    done = manage(tmp_path / "a-file" / "var", "createuser", "alice", "--role", "viewer")

    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert f"cannot create {tmp_path / 'a-file' / 'var'} for the database" in line
    assert "QA_VAR_DIR" in line

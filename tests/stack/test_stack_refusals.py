"""What `manage.py runstack` (make run) refuses before it starts anything: a QA_REDIS_FSYNC it
does not know, a data directory another stack holds, a port in use, settings that cannot be
loaded (run from / without QA_VAR_DIR). Each in one line, with nothing written into a data
directory that did not exist. The lock itself, without a stack."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from core.procs import free_port
from core.stack.lock import DataDirBusy, lock_data_dir
from core.stack.redis_server import start_redis

ROOT = Path(__file__).resolve().parents[2]


SETTINGS = ("REDIS_URL", "DATABASE_URL", "SECRET_KEY", "QA_REDIS_FSYNC", "QA_REDIS_PORT",
            "QA_SPARK", "QA_SPARK_PORT", "SPARK_REMOTE", "SPARK_MASTER", "SPARK_CONF", "PORT",
            "HOST")


def runstack(var_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in SETTINGS}
    return subprocess.run(
        [sys.executable, "manage.py", "runstack", "--workers", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**base, "QA_VAR_DIR": str(var_dir), "PORT": str(free_port()),
             "QA_REDIS_PORT": str(free_port()), "QA_SPARK_PORT": str(free_port()), **env},
    )


def one_line(stderr: str) -> str:
    """A refusal is one line, never a traceback."""
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_an_unknown_fsync_setting_is_refused_with_the_choices(tmp_path: Path) -> None:
    done = runstack(tmp_path / "var", QA_REDIS_FSYNC="sometimes")

    assert done.returncode == 2  # a setting that is not valid: bad input
    said = one_line(done.stderr)
    assert "QA_REDIS_FSYNC must be 'always'" in said and "not 'sometimes'" in said
    assert "'always'" in said and "'everysec'" in said
    assert not (tmp_path / "var").exists()  # nothing was started, nothing written


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port something listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize(("setting", "what"), [
    ("QA_REDIS_PORT", "the embedded redis-server"),
    ("QA_SPARK_PORT", "the embedded Spark Connect server"),
    ("PORT", "the console"),
])
def test_a_port_in_use_is_refused_naming_its_setting_and_writes_nothing(
    tmp_path: Path, taken_port: int, setting: str, what: str
) -> None:
    done = runstack(tmp_path / "site" / "var", HOST="127.0.0.1", **{setting: str(taken_port)})

    assert done.returncode == 1
    said = one_line(done.stderr)
    assert f"cannot use 127.0.0.1:{taken_port} for {what}" in said, said
    assert f"choose another port with {setting}" in said, said
    assert not (tmp_path / "site").exists()  # no data directory, no lock, no secret key


def test_a_port_in_use_leaves_an_existing_data_directory_unlocked(
    tmp_path: Path, taken_port: int
) -> None:
    var_dir = tmp_path / "var"
    var_dir.mkdir()

    done = runstack(var_dir, QA_REDIS_PORT=str(taken_port))

    assert done.returncode == 1 and "QA_REDIS_PORT" in one_line(done.stderr)
    lock_data_dir(var_dir).close()  # free again
    assert {p.name for p in var_dir.iterdir()} <= {"stack.lock"}


def test_settings_that_cannot_be_loaded_are_one_line_and_exit_2(tmp_path: Path) -> None:
    done = runstack(tmp_path / "var", QA_REDIS_PORT="63 90")

    assert done.returncode == 2
    assert one_line(done.stderr) == (
        "manage.py: error: QA_REDIS_PORT must be a whole number, not '63 90'")
    assert not (tmp_path / "var").exists()


@pytest.mark.parametrize("value", ["0.1", "fast", "nan", "inf"])
def test_a_console_poll_interval_that_is_not_seconds_is_refused(tmp_path: Path,
                                                                  value: str) -> None:
    done = runstack(tmp_path / "var", QA_CONSOLE_POLL_S=value)

    assert done.returncode == 2
    assert one_line(done.stderr) == ("manage.py: error: QA_CONSOLE_POLL_S must be a number of "
                                     f"seconds, at least 0.5, not '{value}'")


def test_installed_and_run_from_the_root_it_refuses_in_one_line(tmp_path: Path) -> None:
    """Installed (no checkout around the package) and started from / (a service manager's
    default), the default data directory would be the system's /var: refused in one line,
    not the settings module's 41-line traceback."""
    installed = tmp_path / "site-packages"
    shutil.copytree(ROOT / "queueadmin", installed / "queueadmin",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (installed / "core").symlink_to(ROOT / "core")  # settings look only at queueadmin/'s place
    env = {k: v for k, v in os.environ.items() if k not in (*SETTINGS, "QA_VAR_DIR")}

    done = subprocess.run(
        [sys.executable, "-P", "-m", "queueadmin", "runstack"], cwd="/",
        env={**env, "PYTHONPATH": str(installed)}, capture_output=True, text=True, timeout=60,
    )

    assert done.returncode == 2
    said = one_line(done.stderr)
    assert said.startswith("queueadmin: error: queueadmin keeps its state in ./var, here /var")
    assert "set QA_VAR_DIR" in said


def test_a_data_dir_held_by_another_stack_is_refused_naming_qa_var_dir_and_the_holder(
    tmp_path: Path,
) -> None:
    var_dir = tmp_path / "var"
    held = lock_data_dir(var_dir)  # this test process stands for the first stack
    try:
        done = runstack(var_dir)
    finally:
        held.close()

    assert done.returncode == 1
    said = one_line(done.stderr)
    assert f"QA_VAR_DIR={var_dir}" in said
    assert f"runstack pid {os.getpid()}" in said
    assert not (var_dir / "redis").exists()  # refused before its redis-server started


def test_the_lock_is_taken_once_and_free_again_once_closed(tmp_path: Path) -> None:
    first = lock_data_dir(tmp_path / "var")

    with pytest.raises(DataDirBusy) as busy:
        lock_data_dir(tmp_path / "var")
    assert busy.value.holders == {"runstack": os.getpid()}

    first.close()
    lock_data_dir(tmp_path / "var").close()


def test_a_redis_server_handed_the_lock_holds_it_after_its_supervisor_let_go(
    tmp_path: Path,
) -> None:
    """A supervisor killed with SIGKILL leaves its redis-server running on the data: that one
    must keep the directory locked until it exits."""
    lock = lock_data_dir(tmp_path / "var")
    server = start_redis(tmp_path / "var" / "redis", appendonly=True, pass_fds=[lock.fd])
    try:
        lock.record("redis-server", server.pid)
        lock.close()  # as the supervisor's death would

        with pytest.raises(DataDirBusy) as busy:
            lock_data_dir(tmp_path / "var")
        assert busy.value.holders["redis-server"] == server.pid
    finally:
        server.stop()
    lock_data_dir(tmp_path / "var").close()


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_start_redis_runs_with_the_fsync_it_was_given(tmp_path: Path, fsync: str) -> None:
    server = start_redis(tmp_path / "redis", appendonly=True, fsync=fsync)
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        assert client.config_get("appendfsync") == {"appendfsync": fsync}
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        client.close()
    finally:
        server.stop()


def test_start_redis_refuses_an_fsync_redis_does_not_know(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="appendfsync must be one of"):
        start_redis(tmp_path / "redis", fsync="sometimes")

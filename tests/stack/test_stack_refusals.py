"""What `manage.py runstack` (make run) refuses before it starts anything: a QA_REDIS_FSYNC it
does not know, and a data directory another stack holds. The lock itself, without a stack."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from core.stack.lock import DataDirBusy, lock_data_dir
from core.stack.redis_server import free_port, start_redis

ROOT = Path(__file__).resolve().parents[2]


def runstack(var_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items()
        if k not in ("REDIS_URL", "DATABASE_URL", "QA_REDIS_FSYNC", "QA_REDIS_PORT")
    }
    return subprocess.run(
        [sys.executable, "manage.py", "runstack", "--workers", "0"],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**base, "QA_VAR_DIR": str(var_dir), "PORT": str(free_port()),
             "QA_REDIS_PORT": str(free_port()), **env},
    )


def test_an_unknown_fsync_setting_is_refused_with_the_choices(tmp_path: Path) -> None:
    done = runstack(tmp_path / "var", QA_REDIS_FSYNC="sometimes")

    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "QA_REDIS_FSYNC must be 'always'" in done.stderr and "not 'sometimes'" in done.stderr
    assert "'always'" in done.stderr and "'everysec'" in done.stderr
    assert not (tmp_path / "var" / "redis").exists()  # no redis-server was started


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
    assert "Traceback" not in done.stderr
    assert f"QA_VAR_DIR={var_dir}" in done.stderr
    assert f"runstack pid {os.getpid()}" in done.stderr
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

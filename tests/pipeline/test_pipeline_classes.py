"""The Spark JVMs' class archive (core.pipeline.classes and class_recording, `manage.py
sparkclasses`): made by a real recording server, mapped by the next server, which answers; a
half-written archive is never put in place."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.pipeline import class_recording, server
from core.procs import free_port, wait_listening
from tests.browser_support import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.spark]  # a recording server: 30-40 s of 2 cores


def test_sparkclasses_makes_an_archive_the_next_server_maps_and_a_truncated_one_is_refused(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "classes" / "spark.jsa"
    # A relative --out, as the Makefile gives it: from where the command runs.
    done = subprocess.run([sys.executable, ROOT / "manage.py", "sparkclasses", "--out",
                           "classes/spark.jsa"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"spark class archive: {archive} (") and "made in" in done.stdout
    assert [p.name for p in archive.parent.iterdir()] == ["spark.jsa"]  # no partial left

    again = subprocess.run([sys.executable, "manage.py", "sparkclasses", "--out", str(archive),
                            "--if-missing"], cwd=ROOT, capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 0 and "(already there)" in again.stdout

    config = server.ServerConfig(port=free_port(), local_dir=tmp_path / "local", cores="1",
                                 class_archive=archive)
    server.prepare(config)
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen(server.argv(config), env=server.env(), stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert wait_listening("127.0.0.1", config.port, timeout=120,
                              alive=lambda: proc.poll() is None), \
            (tmp_path / "server.log").read_text()[-2000:]
        # The JVM maps the archive (it would run on without it, saying so, were it refused).
        assert str(archive) in Path(f"/proc/{proc.pid}/maps").read_text()
        from pyspark.sql import SparkSession

        session = SparkSession.builder.remote(config.url).create()
        try:
            assert session.sql("SELECT 41 + 1 AS n").collect()[0].n == 42
        finally:
            session.stop()
        java, classpath = class_recording._java_and_classpath(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)

    # What a JVM killed while it wrote would leave: it crashes the JVM that maps it.
    truncated = tmp_path / "truncated.jsa"
    shutil.copyfile(archive, truncated)
    with open(truncated, "r+b") as part:
        part.truncate(archive.stat().st_size // 4)
    with pytest.raises(class_recording.ClassArchiveError, match="cannot be used"):
        class_recording._check(java, classpath, truncated, tmp_path / "server.log")
    assert list(tmp_path.glob("hs_err_*.log"))  # the crash's report, beside the log
    assert not list(ROOT.glob("hs_err_*.log"))

"""The Spark JVMs' class archive (core.pipeline.classes and class_recording, `manage.py
sparkclasses`): recorded by a real server, mapped by the next server, which answers; a
half-written archive is never put in place."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.pipeline import class_recording, classes, server
from core.procs import free_port, wait_listening
from tests.browser_support import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture
def archive(spark_classes: Path | None, tmp_path: Path) -> Path:
    """The run's archive, which `make test` records (with a relative --out, as here) before
    the suite; recorded here when there is none (pytest run by hand): either way a recording
    is checked, and the suite pays for one only once (30-80 s of both cores)."""
    made = classes.usable()
    if made is not None:
        return made
    out = tmp_path / "classes" / "spark.jsa"
    done = subprocess.run([sys.executable, ROOT / "manage.py", "sparkclasses", "--out",
                           "classes/spark.jsa"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"spark class archive: {out} (") and "made in" in done.stdout
    assert [p.name for p in out.parent.iterdir()] == ["spark.jsa"]  # no partial left
    return out


def test_a_recorded_archive_is_mapped_by_the_next_server_and_a_truncated_one_is_refused(
    archive: Path, tmp_path: Path,
) -> None:
    again = subprocess.run([sys.executable, ROOT / "manage.py", "sparkclasses", "--out",
                            archive.name, "--if-missing"], cwd=archive.parent,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == f"spark class archive: {archive} (already there)"

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

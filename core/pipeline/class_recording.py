"""Recording the Spark JVMs' class archive (core/pipeline/classes.py says what it is for).

A server of its own records the classes it loads while it runs what a data job runs
(server.warm), and writes them as it exits (10-15 s for ~200 MB) to a partial file, which is
put in place only once a JVM of the same java and class path has mapped it under
`-Xshare:on` (which fails rather than run without it): a truncated archive crashes the JVM
that maps it, so no half-written one is ever used."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from core.procs import free_port, wait_listening

from . import server
from .classes import java_option
from .errors import PipelineError

# Rows of the recording run's warm-up job: enough to load and run every path a job takes.
RECORD_ROWS = 30_000


class ClassArchiveError(PipelineError):
    """The archive could not be made (no Java, a server that did not start, an archive no JVM
    could map): said with the JVM's own words."""


def build(out: Path, work: Path, *, timeout: float = 180.0) -> float:
    """Record the archive at `out` with a server of its own (scratch in `work`); the seconds it
    took. ClassArchiveError when it cannot."""
    out = out.absolute()  # the recording JVM runs in `work`
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    partial.unlink(missing_ok=True)
    config = server.ServerConfig(
        port=free_port(), local_dir=work / "local", cores="2",
        conf=(("spark.driver.extraJavaOptions", f"-XX:ArchiveClassesAtExit={partial}"),))
    server.prepare(config)
    log_path = work / "record.log"
    started = time.monotonic()
    try:
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(server.argv(config), env=server.env(), cwd=work,
                                        stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
            except OSError as exc:
                raise ClassArchiveError(f"cannot start Spark: {exc}") from None
        try:
            if not wait_listening("127.0.0.1", config.port, timeout=timeout,
                                  alive=lambda: proc.poll() is None):
                raise ClassArchiveError(f"the recording Spark server did not listen:\n"
                                        f"{_tail(log_path)}")
            java, classpath = _java_and_classpath(proc.pid)
            try:
                server.warm(config.url, work / "warm", rows=RECORD_ROWS)
            except Exception as exc:  # PySpark's errors: said in one line, not a traceback
                raise ClassArchiveError(f"the recording's warm-up job failed: "
                                        f"{type(exc).__name__}: {exc}"[:2000]) from None
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # the JVM writes the archive as it exits
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _check(java, classpath, partial, log_path)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return time.monotonic() - started


def _java_and_classpath(pid: int) -> tuple[str, str]:
    """The running JVM's java and -cp (spark-class execs java: the process is the JVM)."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    try:
        return argv[0], argv[argv.index("-cp") + 1]
    except (ValueError, IndexError):
        raise ClassArchiveError(f"no -cp in the Spark JVM's command line: {argv[:4]}") from None


def _check(java: str, classpath: str, archive: Path, log_path: Path) -> None:
    """A JVM of the same java and class path maps `archive`, or ClassArchiveError."""
    if not archive.is_file() or archive.stat().st_size == 0:
        raise ClassArchiveError(f"the Spark JVM wrote no class archive:\n{_tail(log_path)}")
    # A JVM that crashes on it writes its report beside the log, not wherever this runs.
    try:
        done = subprocess.run([java, "-Xshare:on", java_option(archive),
                               f"-XX:ErrorFile={log_path.parent / 'hs_err_%p.log'}", "-cp",
                               classpath, "-version"], capture_output=True, text=True,
                              timeout=60, cwd=log_path.parent)
    except subprocess.TimeoutExpired:
        raise ClassArchiveError("a JVM mapping the class archive did not answer "
                                "`-version` within 60 s") from None
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        raise ClassArchiveError("the class archive the Spark JVM wrote cannot be used: "
                                + " ".join(said[-3:]))


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-2000:]

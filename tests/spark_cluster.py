"""Starting the JVMs of a real Spark cluster for the cluster tests (the fixtures spark_standalone
and spark_connect, in tests/pipeline/conftest.py), from the pip package alone (no download):
each bound to 127.0.0.1 on free ports, started with `spark-class` and stopped by its PID.
`spark-class` execs java, so the PID is the JVM's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pyspark

SPARK_HOME = Path(pyspark.__file__).resolve().parent
START_TIMEOUT_S = 120


@dataclass
class JVM:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_jvm(name: str, args: list[str], work: Path, **env: str) -> JVM:
    log = work / f"{name}.log"
    # A client's markers (the run's Connect server sets SPARK_REMOTE) make spark-submit refuse
    # a server's or a master's command line.
    inherited = {k: v for k, v in os.environ.items()
                 if k not in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED")}
    full_env = inherited | {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
                             "SPARK_LOG_DIR": str(work), **env}
    with open(log, "ab") as out:
        proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=full_env,
                                cwd=work, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    return JVM(name, proc, log)


def wait_for(jvm: JVM, *, port: int | None = None, line: str | None = None) -> None:
    """Until the JVM listens on `port` or logs `line`; fails with its log's tail."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if jvm.proc.poll() is not None:
            break
        if line is not None and line in jvm.log.read_text(errors="replace"):
            return
        if port is not None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
        time.sleep(0.2)
    tail = jvm.log.read_text(errors="replace")[-3000:]
    raise RuntimeError(f"{jvm.name} did not start (exit {jvm.proc.poll()}):\n{tail}")

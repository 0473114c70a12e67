"""A real Spark cluster for the cluster tests, from the pip package alone (no download): a
standalone master and one worker, and a Spark Connect server, all bound to 127.0.0.1 on free
ports, each its own JVM started with `spark-class` and stopped by its PID at the end of the
run. `spark-class` execs java, so the PID is the JVM's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest

from core.stack.redis_server import free_port

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


def _start(name: str, args: list[str], work: Path, **env: str) -> JVM:
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


def _wait_for(jvm: JVM, *, port: int | None = None, line: str | None = None) -> None:
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


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """spark://127.0.0.1:<port>, with one worker (1 core, 1 GB) registered."""
    work = tmp_path_factory.mktemp("spark-standalone")
    port = free_port()
    # The REST submission server (6066) and the web UIs are not needed: off or on free ports.
    opts = "-Dspark.master.rest.enabled=false -Dspark.ui.enabled=false"
    master = _start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(free_port())],
                    work, SPARK_MASTER_OPTS=opts)
    jvms = [master]
    try:
        _wait_for(master, line="I have been elected leader")
        url = f"spark://127.0.0.1:{port}"
        worker = _start("worker", ["org.apache.spark.deploy.worker.Worker", "--host",
                                   "127.0.0.1", "--port", str(free_port()), "--webui-port",
                                   str(free_port()), "--cores", "1", "--memory", "1g",
                                   "--work-dir", str(work / "work"), url], work)
        jvms.append(worker)
        _wait_for(worker, line="Successfully registered with master")
        yield url
    finally:
        for jvm in reversed(jvms):
            jvm.stop()


@pytest.fixture(scope="session")
def spark_connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """sc://127.0.0.1:<port>: a Spark Connect server (local[1] behind it). Its class ships in
    the pip package's jars (spark-connect_2.13); the Python client needs pyspark[connect]."""
    work = tmp_path_factory.mktemp("spark-connect")
    port = free_port()
    server = _start("connect", [
        "org.apache.spark.deploy.SparkSubmit",
        "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master", "local[1]", "--name", "queueadmin-tests-connect",
        "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
        "--conf", f"spark.connect.grpc.binding.port={port}",
        "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.sql.shuffle.partitions=1",
        "--conf", f"spark.local.dir={work / 'local'}",
        "spark-internal",
    ], work)
    try:
        _wait_for(server, port=port)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.stop()

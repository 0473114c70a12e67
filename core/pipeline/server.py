"""The embedded Spark: one Spark Connect server for every worker of the stack.

`runstack` (make run) starts it from the installed PySpark (its `spark-connect` jar and
`spark-class`), supervises it like the other services, and warms it with a first job; the
workers talk to it as thin clients (no JVM in a worker process: a worker's restart costs no
JVM start, and one JVM uses the machine's cores for whichever chunks run). Inside it, Spark's
FAIR scheduler gives each data job a pool of its own (core.pipeline.spark_query.job_pool), so a
small job's chunk does not wait behind a big job's tasks.

On a cluster, SPARK_REMOTE points the workers at a Connect server there instead (this module
is then not used), and SPARK_MASTER gives each worker a classic session of its own.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .classes import java_option
from .spark_target import LOG4J, parse_conf  # imports no PySpark

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
# An operation whose client went away (a worker killed mid-chunk) runs on in a Connect server
# until nobody has reattached to it for this long; then it is interrupted. Spark's default is
# five minutes of a dead chunk's work taking cores from the live ones.
DETACHED_TIMEOUT = "15s"


def spark_home() -> Path:
    from .jvm import pyspark_home

    return pyspark_home()


@dataclass(frozen=True)
class ServerConfig:
    """How the embedded server runs: its port on 127.0.0.1, its scratch folder (emptied at
    each start), the driver's memory, the jar of the project's Spark reader (None: without
    it), and more Spark settings (SPARK_CONF entries, which win)."""

    port: int
    local_dir: Path
    memory: str = "1g"
    jar: Path | None = None
    cores: str = "*"
    ui: bool = False
    conf: tuple[tuple[str, str], ...] = ()
    class_archive: Path | None = None  # the JVM's classes mapped from it (classes.py)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"


def settings_config(var_dir: Path) -> ServerConfig:
    """The server of the stack whose data folder is `var_dir` (Django settings)."""
    from django.conf import settings

    from .classes import usable

    return ServerConfig(
        port=int(settings.SPARK_CONNECT_PORT), local_dir=var_dir / "spark" / "connect",
        memory=settings.SPARK_MEMORY, ui=bool(settings.SPARK_UI),
        conf=parse_conf(settings.SPARK_CONF), class_archive=usable(),
    )


def server_conf(config: ServerConfig) -> dict[str, str]:
    """The Spark settings of the server: bound to loopback, FAIR scheduling, quiet logging,
    the pipeline's own _SUCCESS, UTC, and what SPARK_CONF adds."""
    conf = {
        "spark.master": f"local[{config.cores}]",
        "spark.app.name": "queueadmin-spark",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(config.port),
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": config.memory,
        "spark.ui.enabled": "true" if config.ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.scheduler.mode": "FAIR",
        "spark.local.dir": str(config.local_dir),
        "spark.sql.session.timeZone": "UTC",
        # No ${...} substitution in SQL text: it reads the configuration and the environment.
        "spark.sql.variable.substitute": "false",
        "spark.sql.shuffle.partitions": str(os.cpu_count() or 2)
        if config.cores == "*" else config.cores,
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        # A chunk of a folder names its files (tens to hundreds): past this many paths Spark
        # lists them with a Spark job of its own, which cost a chunk more than the listing.
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "100000",
        "spark.hadoop.parquet.enable.summary-metadata": "false",
        # A chunk whose aggregate came out big is refused past this, not held in the heap
        # (chunk._returned: the job's chunks then let Spark write their parts).
        "spark.driver.maxResultSize": "128m",
        "spark.connect.execute.manager.detachedTimeout": DETACHED_TIMEOUT,
        "spark.connect.execute.manager.maintenanceInterval": "5s",
        # An idle JVM gives its unused heap back (G1's periodic collection, down to a small
        # minimum): after a job the heap stood at 464 MB committed for 130 MB used.
        "spark.driver.extraJavaOptions": " ".join(filter(None, (
            f"-Dlog4j2.configurationFile={LOG4J} -Xms64m -XX:G1PeriodicGCInterval=15000 "
            "-XX:MinHeapFreeRatio=10 -XX:MaxHeapFreeRatio=30",
            # its classes mapped from the archive `manage.py sparkclasses` made (classes.py)
            java_option(config.class_archive)))),
    }
    if config.jar is not None:
        conf["spark.jars"] = str(config.jar)
    for key, value in config.conf:
        conf[key] = (f"{conf['spark.driver.extraJavaOptions']} {value}"
                     if key == "spark.driver.extraJavaOptions" else value)
    return conf


def argv(config: ServerConfig) -> list[str]:
    """The server's command line: `spark-class` execs the JVM, so its pid is the JVM's."""
    args = [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.SparkSubmit",
            "--class", SERVER_CLASS]
    for key, value in server_conf(config).items():
        args += ["--conf", f"{key}={value}"]
    return [*args, "spark-internal"]


def env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment: its Python workers (UDFs, transforms) are this Python, with
    the project importable."""
    from django.conf import settings

    out = dict(base if base is not None else os.environ)
    # spark-submit refuses a server's command line when SPARK_REMOTE says it is a client.
    for client_only in ("SPARK_REMOTE", "SPARK_LOCAL_REMOTE", "SPARK_CONNECT_MODE_ENABLED"):
        out.pop(client_only, None)
    out.update({
        "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(p for p in (settings.CODE_PATH,
                                                  out.get("PYTHONPATH", "")) if p),
        # glibc gives each of the JVM's many threads an arena of its own; two keep its native
        # memory (and so its RSS) down by a couple of hundred megabytes.
        "MALLOC_ARENA_MAX": out.get("MALLOC_ARENA_MAX", "2"),
    })
    return out


def prepare(config: ServerConfig) -> None:
    """An empty scratch folder for the server (a previous run's shuffle files go)."""
    shutil.rmtree(config.local_dir, ignore_errors=True)
    config.local_dir.mkdir(parents=True, exist_ok=True)


WARM_SQL = ("SELECT k, m, sum(v) AS s, count(v) AS n, max(t) AS t FROM chunk "
            "GROUP BY k, m")


def warm(url: str, scratch: Path, *, rows: int = 300_000) -> float:
    """Run what a data job runs once (write Parquet, read it, aggregate, write Parquet and
    CSV), so that the JVM has loaded and compiled those paths before the first job: a cold
    server took 13 s for a first job that takes 0.6 s warm. Returns the seconds it took."""
    from pyspark.sql import SparkSession

    started = time.monotonic()
    shutil.rmtree(scratch, ignore_errors=True)
    session = SparkSession.builder.remote(url).create()
    try:
        session.conf.set("spark.scheduler.pool", "queueadmin-warm")
        data = str(scratch / "in")
        session.range(rows).selectExpr(
            "cast(id % 13 AS string) AS k", "id % 12 AS m", "cast(id AS double) / 7 AS v",
            "timestamp_seconds(id) AS t").write.mode("overwrite").parquet(data)
        for i in range(2):
            session.read.parquet(data).createOrReplaceTempView("chunk")
            result = session.sql(WARM_SQL)
            result.write.mode("overwrite").parquet(str(scratch / f"out{i}"))
            result.coalesce(1).write.mode("overwrite").option("header", "true").csv(
                str(scratch / f"csv{i}"))
    finally:
        session.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return time.monotonic() - started

"""Where this process's Spark sessions run, from Django settings: a Spark Connect URL (the
stack's own server, core.pipeline.server, by default; SPARK_REMOTE's) or a master URL for
classic sessions (SPARK_MASTER); the settings every session gets, and SPARK_CONF's over them.
Nothing here imports PySpark.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .classes import java_option
from .errors import PipelineError

LOG4J = Path(__file__).with_name("log4j2.properties")
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
QUICK_JIT = "-XX:TieredStopAtLevel=1"


class SparkConfError(PipelineError, ValueError):
    """SPARK_CONF is not a list of spark.* settings."""


@dataclass(frozen=True)
class SparkTarget:
    """Where the sessions of this process run: a Spark Connect URL (remote), else a master URL
    for classic sessions. `expected`: Spark was configured for this process (SPARK_REMOTE or
    SPARK_MASTER given, as the stack gives its workers), so a worker waits for it before its
    first task."""

    master: str = "local[*]"
    remote: str = ""
    expected: bool = True
    shuffle_partitions: int = 0  # 0: default_shuffle_partitions(master)
    ui: bool = False
    conf: tuple[tuple[str, str], ...] = ()  # more settings (SPARK_CONF), over the defaults
    class_archive: Path | None = None  # a classic session's JVM maps its classes (classes.py)

    @property
    def description(self) -> str:
        return self.remote or self.master


def target_from_settings() -> SparkTarget:
    """SPARK_REMOTE / SPARK_MASTER / SPARK_SHUFFLE_PARTITIONS / SPARK_UI / SPARK_CONF from
    Django settings, read when the first session is made: SPARK_REMOTE, else SPARK_MASTER,
    else the stack's own Connect server (QA_SPARK_PORT). SparkConfError for a SPARK_CONF that
    is not a list of spark.* settings."""
    from django.conf import settings

    from .classes import usable

    master = getattr(settings, "SPARK_MASTER", "")
    remote = getattr(settings, "SPARK_REMOTE", "")
    return SparkTarget(
        master=master or "local[*]",
        remote=remote or ("" if master else embedded_url()),
        expected=bool(remote or master),
        shuffle_partitions=int(getattr(settings, "SPARK_SHUFFLE_PARTITIONS", 0)),
        ui=bool(getattr(settings, "SPARK_UI", False)),
        conf=parse_conf(getattr(settings, "SPARK_CONF", "")),
        class_archive=None if remote else usable(),
    )


def parse_conf(text: str) -> tuple[tuple[str, str], ...]:
    """SPARK_CONF's `key=value` entries, one per line or separated by `;` (a value may hold
    spaces: `spark.driver.extraJavaOptions=-XX:+UseG1GC -Xss4m`)."""
    out = []
    for raw in re.split(r"[;\n]", text):
        entry = raw.strip()
        if not entry:
            continue
        key, eq, value = entry.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or not key.startswith("spark.") or not value or " " in key:
            raise SparkConfError(
                f"SPARK_CONF: {entry!r} is not a Spark setting: give key=value entries whose "
                "keys start with spark., separated by ';' or new lines "
                "(e.g. spark.driver.memory=8g;spark.executor.memory=4g)")
        out.append((key, value))
    return tuple(out)


def embedded_url() -> str:
    """The stack's own Spark Connect server (core.pipeline.server)."""
    from django.conf import settings

    return f"sc://127.0.0.1:{int(settings.SPARK_CONNECT_PORT)}"


def default_shuffle_partitions(master: str) -> int:
    """As many shuffle partitions as local[N] has threads (local[*]: the machine's cores),
    else 8. A chunk's aggregation is small: with 8 partitions on 2 cores a chunk of the
    benchmark's job took 0.50 s, with 2 0.29 s (bench_pipeline.py, 1.35M rows)."""
    return cores_of(master, here=True) or 8


def cores_of(master: str, *, here: bool) -> int | None:
    """local[N] -> N; local -> 1 (Spark's one worker thread); local[*] -> this machine's cores
    when it runs `here`; else None."""
    m = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if m is None:
        return None
    if m.group(1) is None:
        return 1
    if m.group(1) != "*":
        return max(1, int(m.group(1)))
    return (os.cpu_count() or 1) if here else None


def base_conf(target: SparkTarget, *, app: str, local_dir: Path | None,
              jar: Path | None = None) -> dict[str, str]:
    """The configuration every session of the project gets (workers, the CLI's check, tests)."""
    conf = {
        "spark.app.name": app,
        "spark.ui.enabled": "true" if target.ui else "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(target.shuffle_partitions
                                            or default_shuffle_partitions(target.master)),
        "spark.sql.session.timeZone": "UTC",
        # The pipeline writes its own _SUCCESS, once the whole job's output is in place.
        "spark.hadoop.mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
        "spark.hadoop.parquet.enable.summary-metadata": "false",
        "spark.driver.extraJavaOptions": " ".join(filter(None, (
            f"-Dlog4j2.configurationFile={LOG4J}", java_option(target.class_archive)))),
    }
    if target.master.startswith("local"):
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.driver.host"] = "127.0.0.1"
    if local_dir is not None:
        conf["spark.local.dir"] = str(local_dir)
    if jar is not None:  # the project's reader (core.pipeline.jvm)
        conf["spark.jars"] = str(jar)
    conf["spark.sql.variable.substitute"] = "false"  # ${...} would read the configuration
    for key, value in target.conf:  # SPARK_CONF wins, but the driver keeps its quiet logging
        conf[key] = f"{conf[JAVA_OPTIONS]} {value}" if key == JAVA_OPTIONS else value
    return conf


def parse_url(url: str) -> tuple[str, int]:
    """host and port of a Spark Connect URL, sc://host:port[/;params]."""
    rest = url.split("://", 1)[1].split("/", 1)[0]
    host, colon, port = rest.rpartition(":")
    if not colon or rest.endswith("]"):  # no port (sc://host, sc://[::1]): Spark's default
        host, port = rest, ""
    return (host.strip("[]") or "127.0.0.1"), int(port or 15002)


def redacted(url: str) -> str:
    """A Connect URL without its token (sc://host:port/;token=...)."""
    return re.sub(r"(token=)[^;]*", r"\1***", url)

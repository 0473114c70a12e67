"""The Spark JVMs' classes from an archive (class data sharing, JDK 13+'s dynamic AppCDS).

At each start a Spark JVM reads, parses and verifies some 20,000 classes from Spark's jars.
A JVM given an archive of them (`-XX:SharedArchiveFile`) maps them from one file instead: a
Spark Connect server listens in 3.5-3.9 s instead of 7.3-8.0 s, with half the CPU by then,
and its warm-up job takes 9.0-9.4 s instead of 11.3-12.8 s; but it holds ~100-185 MiB more
(the JDK maps the ~200 MB archive at a random address and rewrites its pointers, so its
pages stay resident and private; docs/performance.md, "Spark's start"). So it is off unless
QA_SPARK_CLASSES names an archive: worth it where Spark JVMs start often (the test suite
starts dozens; `make test` makes one for them), not for a stack that starts its server once.

`manage.py sparkclasses` makes one (core/pipeline/class_recording.py), and puts it in place
only once a JVM has mapped it: a truncated archive crashes the JVM that maps it. The
embedded server and classic sessions start with it (server.server_conf,
spark_target.base_conf). The JVM itself refuses an archive made by another JDK or for other
jars (a warning, and it runs without), so an upgrade of PySpark or of Java costs the speed
until the archive is made again, never a start."""

from __future__ import annotations

from pathlib import Path


def archive_path() -> Path | None:
    """Where the archive is kept (QA_SPARK_CLASSES; None: no archive)."""
    from django.conf import settings

    path: Path | None = settings.SPARK_CLASS_ARCHIVE
    return path


def usable() -> Path | None:
    """The archive, if one was made (a JVM mapped it before it was put in place)."""
    path = archive_path()
    return path if path is not None and path.is_file() else None


def java_option(path: Path | None) -> str:
    """The JVM option that maps the archive ("" without one)."""
    return f"-XX:SharedArchiveFile={path}" if path is not None else ""

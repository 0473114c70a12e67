"""The JVM side of the pipeline: a small Spark DataSource V2 (Java, in src/) that reads slices
of an input straight from its files with Spark's own readers -- a range of row groups of a
Parquet file, or a byte range of a line-delimited text file split at line boundaries -- which
no public Spark API does.

The jar is compiled here from the sources, against the installed PySpark's jars, and named by a
hash of both (`jar_name()`), so a changed source or another Spark version gives another jar.
Spark loads it from `--jars` (a Spark Connect server) or `spark.jars` (a classic session):

    jar = ensure_jar(Path("var/jvm"))
    df = read_parquet_groups(session, [("/data/x.parquet", 0, 15)])
    df = read_text_ranges(session, [("/data/x.csv", 0, 1 << 30)], skip_header=True)
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import PipelineError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SOURCE_DIR: Path = Path(__file__).resolve().parent / "src"
FORMAT = "org.queueadmin.spark.Slices"
JDK_HINT = "install a JDK: apt-get install openjdk-17-jdk-headless"
ERROR_LINES = 20  # of javac's output, in a JarBuildError


class JarBuildError(PipelineError, RuntimeError):
    """The data source's jar could not be built (no JDK, or the sources do not compile)."""


def spark_jars_dir() -> Path:
    """The installed PySpark's jars folder: the classpath the sources compile against."""
    return pyspark_home() / "jars"


def pyspark_home() -> Path:
    """The installed PySpark's folder, found without importing it: importing pyspark costs a
    process (the stack's supervisor) a hundred megabytes it never uses."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise JarBuildError("PySpark is not installed: pip install -e . installs it")
    return Path(spec.origin).resolve().parent


def _sources() -> list[Path]:
    return sorted(SOURCE_DIR.rglob("*.java"))


def jar_name() -> str:
    """queueadmin-spark-<12 hex>.jar, the hash covering every source (path and text) and the
    PySpark version."""
    digest = hashlib.sha256()
    for source in _sources():
        digest.update(source.relative_to(SOURCE_DIR).as_posix().encode() + b"\0")
        digest.update(source.read_bytes() + b"\0")
    digest.update(f"pyspark {importlib.metadata.version('pyspark')}".encode())
    return f"queueadmin-spark-{digest.hexdigest()[:12]}.jar"


def jdk_tool(name: str) -> str | None:
    """A JDK tool (javac, jar, java): from JAVA_HOME if it has one, else from PATH."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        tool = Path(java_home) / "bin" / name
        if tool.is_file() and os.access(tool, os.X_OK):
            return str(tool)
    return shutil.which(name)


def _compile(classes: Path) -> None:
    javac = jdk_tool("javac")
    if javac is None:
        raise JarBuildError(f"cannot build {FORMAT}: javac not found; {JDK_HINT}")
    sources = _sources()
    if not sources:
        raise JarBuildError(f"cannot build {FORMAT}: no Java sources under {SOURCE_DIR}")
    args = [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8",
            "-cp", f"{spark_jars_dir()}/*", "-d", str(classes), *map(str, sources)]
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        output = (done.stderr or done.stdout).strip().splitlines()
        first = "\n".join(output[:ERROR_LINES])
        raise JarBuildError(
            f"cannot build {FORMAT}: javac failed (exit {done.returncode}) against the jars "
            f"of {spark_jars_dir()}:\n{first}")


def _package(classes: Path, jar: Path) -> None:
    """classes/ into `jar`: with the JDK's jar tool if there is one, else as a zip with a
    manifest (all a jar is)."""
    tool = jdk_tool("jar")
    if tool is not None:
        done = subprocess.run([tool, "--create", "--file", str(jar), "-C", str(classes), "."],
                              capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return
        jar.unlink(missing_ok=True)
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: queueadmin\n\n")
        for path in sorted(classes.rglob("*")):
            if path.is_file():
                out.write(path, path.relative_to(classes).as_posix())


def build(out_dir: Path) -> Path:
    """Compile the sources (javac --release 17 against the PySpark jars) and write the jar into
    `out_dir` atomically (another process never sees half a jar). Returns its path.
    JarBuildError when javac is missing or the sources do not compile."""
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / jar_name()
    with tempfile.TemporaryDirectory(prefix="queueadmin-jvm-") as work:
        classes = Path(work) / "classes"
        classes.mkdir()
        _compile(classes)
        # Packed beside the target (same file system, so the rename is atomic), in a
        # directory of this process's own.
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=f".{target.name}.") as staging:
            jar = Path(staging) / target.name
            _package(classes, jar)
            os.replace(jar, target)
    return target


def ensure_jar(out_dir: Path) -> Path:
    """The jar for these sources and this PySpark in `out_dir`, built if it is not there yet.
    Safe for processes racing on it: each builds into a file of its own and renames it over."""
    target = out_dir / jar_name()
    if target.is_file():
        return target
    return build(out_dir)


def read_parquet_groups(session: SparkSession, pieces: list[tuple[str, int, int]], *,
                        partitions: int | None = None) -> DataFrame:
    """The rows of row groups [first, end) of each (path, first, end), in that order: the
    columns and types spark.read.parquet gives the first file. `partitions`: read in about
    that many Spark partitions (at least one per piece); None: about 64 MB each."""
    return _read(session, "parquet", pieces, **_partitions(partitions))


def read_text_ranges(session: SparkSession, ranges: list[tuple[str, int, int]], *,
                     skip_header: bool, partitions: int | None = None) -> DataFrame:
    """One string column `value`: the lines that start in bytes [start, end) of each (path,
    start, end), in that order, without their line ends; consecutive ranges of a file give each
    line once. skip_header drops a file's first line (in the range starting at byte 0).
    `partitions` as for read_parquet_groups (None: about 32 MB each)."""
    return _read(session, "text", ranges, skipHeader="true" if skip_header else "false",
                 **_partitions(partitions))


def _partitions(n: int | None) -> dict[str, str]:
    return {} if n is None else {"partitions": str(max(1, int(n)))}


def _read(session: SparkSession, fmt: str, slices: list[tuple[str, int, int]],
          **options: str) -> DataFrame:
    reader = (session.read.format(FORMAT).option("format", fmt)
              .option("slices", json.dumps([[str(p), int(a), int(b)] for p, a, b in slices])))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


_NOT_FOUND = ("DATA_SOURCE_NOT_FOUND", "ClassNotFoundException", "Failed to find the data source",
              "NoClassDefFoundError")


_AVAILABLE: dict[str, bool] = {}


def available_at(session: SparkSession, target: str) -> bool:
    """Whether `session`'s Spark has the data source (its jar on the classpath): the
    embedded server and classic sessions of the project do; a cluster's Connect server may
    not, and a job there reads whole files (or filters a file's rows) instead. Asked with a
    read of no slices, which the source itself refuses when it is there; remembered per
    worker process and Spark `target` (its address) once Spark answered, as the question
    costs a failed analysis, 0.1 s or more. An error that is no answer (the server went
    away) is taken as yes, asked again next time, and the chunk's own read will tell."""
    known = _AVAILABLE.get(target)
    if known is None:
        answer = _ask(session)
        if answer is None:
            return True
        known = _AVAILABLE[target] = answer
    return known


def known_available(target: str) -> bool | None:
    """What available_at() found for `target` in this process; None when not asked yet."""
    return _AVAILABLE.get(target)


def _ask(session: SparkSession) -> bool | None:
    """True or False as Spark answered; None when its error is no answer."""
    try:
        _read(session, "text", []).schema  # noqa: B018  (analysis is the question)
    except Exception as exc:  # which error it is, is the answer
        text = str(exc)
        if any(s in text for s in _NOT_FOUND):
            return False
        return True if "Slices" in text else None
    return True

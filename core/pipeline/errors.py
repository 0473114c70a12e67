"""Spark's failures as messages a person can act on: what went wrong, in which chunk, and
what to change. They go into the dead letter (and from there to the CLI and the console)."""

from __future__ import annotations

import re


class DataJobError(Exception):
    """A data task failed for a reason the message explains."""


class JvmDied(DataJobError):
    """The worker's Spark JVM is gone: the worker exits for its supervisor to restart it."""


def short(exc: BaseException, limit: int = 600) -> str:
    """The first meaningful lines of a Spark error, without the JVM stack trace."""
    text = str(exc).split("JVM stacktrace:")[0]
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    # A Py4J error is "An error occurred while calling o123.parquet.\n: <the Java error>"
    lines = [ln.lstrip(": ") for ln in lines if not ln.startswith("at ")]
    out = " ".join(lines[:3])
    return out if len(out) <= limit else out[: limit - 3] + "..."


def jvm_died(exc: BaseException) -> bool:
    """Whether `exc` says the Py4J link to the JVM is broken (the JVM died or was killed)."""
    name = type(exc).__name__
    if name in ("Py4JNetworkError", "ConnectionRefusedError", "ConnectionResetError",
                "BrokenPipeError"):
        return True
    text = str(exc)
    return name == "Py4JError" and ("Java side" in text or "connect" in text.lower())


def explain(exc: BaseException, *, where: str, sql_option: str = "--sql") -> str:
    """A message for `exc` raised while `where` (e.g. "chunk 3 of job J") ran."""
    name = type(exc).__name__
    text = str(exc)
    brief = short(exc)
    if name == "ParseException" or "PARSE_SYNTAX_ERROR" in text:
        return f"{where}: {sql_option} does not parse: {brief}"
    if "UNRESOLVED_COLUMN" in text or "UNRESOLVED_FIELD" in text:
        column = re.search(r"name `([^`]+)`", text)
        what = f"`{column.group(1)}`" if column else "a column"
        return (f"{where}: {sql_option} names {what}, which the data does not have: {brief}")
    if name == "AnalysisException" and ("PATH_NOT_FOUND" in text or "does not exist" in text):
        return f"{where}: a file is missing: {brief}"
    if name == "AnalysisException":
        return f"{where}: {sql_option} cannot run on this data: {brief}"
    if any(s in text for s in ("OutOfMemoryError", "Java heap space", "GC overhead limit",
                               "Container killed", "exceeding memory limits")):
        return (f"{where}: Spark ran out of memory ({brief}). Split the input into more chunks "
                "(--chunks or --rows-per-chunk), or give Spark more memory "
                "(spark.driver.memory for local[*], executor memory on a cluster)")
    if "PARQUET_COLUMN_DATA_TYPE_MISMATCH" in text or "SchemaColumnConvertNotSupported" in text:
        return (f"{where}: the input's files do not share one schema (a column's type differs "
                f"from one file to another): {brief}")
    if any(s in text for s in ("FAILED_READ_FILE", "is not a Parquet file", "CORRUPT",
                               "MALFORMED_RECORD", "magic number", "Malformed",
                               "EOFException", "Could not read footer")):
        return (f"{where}: an input file is corrupt or not in the format given (--format): "
                f"{brief}")
    if jvm_died(exc):
        return (f"{where}: the worker's Spark JVM died ({brief}); the worker exits for its "
                "supervisor to restart it, and the task runs again")
    return f"{where}: {name}: {brief}"

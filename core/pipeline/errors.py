"""Spark's failures as messages a person can act on: what went wrong, in which chunk, and
what to change. They go into the dead letter (and from there to the CLI and the console)."""

from __future__ import annotations

import re

from core.queue import QueueadminError


class PipelineError(QueueadminError):
    """Root of what the data pipeline raises: a job refused (SpecError and its kind), an input
    that cannot be read as said (InputError), a data task's failure (DataJobError)."""


class DataJobError(PipelineError):
    """A data task failed for a reason the message explains; permanent=True when running it
    again cannot help (the worker then dead-letters it at once: core.worker.Permanent)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class JvmDied(DataJobError):
    """The worker's Spark JVM is gone: the worker exits for its supervisor to restart it."""


def short(exc: BaseException, limit: int = 600) -> str:
    """The first meaningful lines of a Spark error, without the JVM stack trace."""
    text = str(exc).split("JVM stacktrace:")[0]
    # An analysis error goes on with the query plan after its SQLSTATE: not for a person.
    text = re.sub(r"(SQLSTATE: \w+).*", r"\1", text, count=1, flags=re.S)
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


def is_permanent(exc: BaseException) -> bool:
    """Whether `exc` is a failure that the same task cannot get past by running again: the SQL
    does not parse or does not fit the data, or the input's files disagree on their schema.
    A missing file, memory, a dead JVM or anything else may pass on a retry."""
    text = str(exc)
    if type(exc).__name__ == "ParseException" or "PARSE_SYNTAX_ERROR" in text:
        return True
    if "PARQUET_COLUMN_DATA_TYPE_MISMATCH" in text or "SchemaColumnConvertNotSupported" in text:
        return True
    if re.search(r"SQLSTATE: 22\w{3}", text):  # a data exception: a value the SQL cannot take
        return True
    # raise_error() and assert_true() in the SQL: the job's own check refused a row, which it
    # refuses again on every run.
    if "SQLSTATE: P0001" in text or "USER_RAISED_EXCEPTION" in text:
        return True
    return type(exc).__name__ == "AnalysisException" and not (
        "PATH_NOT_FOUND" in text or "does not exist" in text)


def explain(exc: BaseException, *, where: str, sql_option: str = "--sql") -> str:
    """A message for `exc` raised while `where` (e.g. "chunk 3 of job J") ran; where="" for
    no prefix (a refusal at submit, which says "data job refused:" itself)."""
    reason = _reason(exc, sql_option)
    return f"{where}: {reason}" if where else reason


def _reason(exc: BaseException, sql_option: str) -> str:
    """What went wrong in `exc`, and what to change."""
    name = type(exc).__name__
    text = str(exc)
    brief = short(exc)
    if name == "ParseException" or "PARSE_SYNTAX_ERROR" in text:
        return f"{sql_option} does not parse: {brief}"
    if "UNRESOLVED_COLUMN" in text or "UNRESOLVED_FIELD" in text:
        column = re.search(r"name `([^`]+)`", text)
        what = f"`{column.group(1)}`" if column else "a column"
        return f"{sql_option} names {what}, which the data does not have: {brief}"
    if name == "AnalysisException" and ("PATH_NOT_FOUND" in text or "does not exist" in text):
        return f"a file is missing: {brief}"
    if name == "AnalysisException":
        return f"{sql_option} cannot run on this data: {brief}"
    if any(s in text for s in ("OutOfMemoryError", "Java heap space", "GC overhead limit",
                               "Container killed", "exceeding memory limits")):
        return (f"Spark ran out of memory ({brief}). Split the input into more chunks "
                "(--chunks or --rows-per-chunk), or give Spark more memory "
                "(spark.driver.memory for local[*], executor memory on a cluster)")
    if "PARQUET_COLUMN_DATA_TYPE_MISMATCH" in text or "SchemaColumnConvertNotSupported" in text:
        return (f"the input's files do not share one schema (a column's type differs "
                f"from one file to another): {brief}")
    if any(s in text for s in ("FAILED_READ_FILE", "is not a Parquet file", "CORRUPT",
                               "MALFORMED_RECORD", "magic number", "Malformed",
                               "EOFException", "Could not read footer")):
        return (f"an input file is corrupt or not in the format given (--format): "
                f"{brief}")
    if jvm_died(exc):
        return (f"the worker's Spark JVM died ({brief}); the worker exits for its "
                "supervisor to restart it, and the task runs again")
    return f"{name}: {brief}"

"""Spark's failures as messages a person can act on (no JVM needed: the messages are read
from the exceptions' class names and texts, as Spark 4 writes them)."""

from __future__ import annotations

import pytest

from core.pipeline.errors import explain, is_permanent, jvm_died, short
from core.pipeline.spark_sessions import connect_failure


def named(name: str, text: str) -> Exception:
    return type(name, (Exception,), {})(text)


JAVA_TRACE = ("\nJVM stacktrace:\norg.apache.spark.SparkException: x\n"
              "\tat org.apache.spark.Foo.bar(Foo.scala:1)")


@pytest.mark.parametrize(("exc", "want"), [
    (named("ParseException", "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'."
           + JAVA_TRACE), "chunk 3 of job J: --sql does not parse: [PARSE_SYNTAX_ERROR]"),
    (named("AnalysisException", "[UNRESOLVED_COLUMN.WITH_SUGGESTION] A column, variable, or "
           "function parameter with name `dep_dely` cannot be resolved."),
     "chunk 3 of job J: --sql names `dep_dely`, which the data does not have"),
    (named("Py4JJavaError", "An error occurred while calling o77.save.\n: "
           "java.lang.OutOfMemoryError: Java heap space"),
     "chunk 3 of job J: Spark ran out of memory (An error occurred while calling o77.save. "
     "java.lang.OutOfMemoryError: Java heap space). Split the input into more chunks"),
    (named("SparkException", "[FAILED_READ_FILE.NO_HINT] Encountered error while reading "
           "file file:/d/in.parquet."),
     "chunk 3 of job J: an input file is corrupt or not in the format given (--format)"),
    (named("SparkException", "[FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] Data type "
           "mismatches when reading Parquet column [id]. Expected Spark type bigint, actual "
           "Parquet type BINARY."),
     "chunk 3 of job J: the input's files do not share one schema (a column's type differs "
     "from one file to another): [FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH]"),
    (named("Py4JNetworkError", "Answer from Java side is empty"),
     "chunk 3 of job J: the worker's Spark JVM died (Answer from Java side is empty); the "
     "worker exits for its supervisor to restart it"),
    (ValueError("bad row 500"), "chunk 3 of job J: ValueError: bad row 500"),
])
def test_each_failure_says_what_to_change(exc: Exception, want: str) -> None:
    message = explain(exc, where="chunk 3 of job J")
    assert message.startswith(want), message
    assert "JVM stacktrace" not in message and "at org.apache" not in message


def test_short_keeps_the_first_lines_and_caps_the_length() -> None:
    assert short(named("X", "one\n\ntwo\nthree\nfour" + JAVA_TRACE)) == "one two three"
    assert len(short(named("X", "y" * 5000))) == 600


def test_jvm_died_is_told_from_other_py4j_errors() -> None:
    assert jvm_died(ConnectionRefusedError(111, "Connection refused"))
    assert jvm_died(named("Py4JError", "An error occurred while trying to connect"))
    assert not jvm_died(named("Py4JError", "Method foo does not exist"))
    assert not jvm_died(named("Py4JJavaError", "java.lang.ArithmeticException"))


def test_connect_failures_are_told_from_the_jobs_own_errors() -> None:
    assert connect_failure(named("SparkConnectGrpcException", "<_MultiThreadedRendezvous of "
                                 "RPC that terminated with: status = StatusCode.UNAVAILABLE "
                                 "details = \"failed to connect to all addresses\">"))
    assert connect_failure(named("SparkConnectGrpcException",
                                 "[INVALID_HANDLE.SESSION_NOT_FOUND] The handle is invalid."))
    assert connect_failure(named("RetriesExceeded", "[RETRIES_EXCEEDED] UNAVAILABLE ..."))
    assert not connect_failure(named("AnalysisException", "[UNRESOLVED_COLUMN] ..."))
    assert not connect_failure(named("SparkConnectGrpcException", "Job aborted: OOM"))


@pytest.mark.parametrize(("exc", "permanent"), [
    (named("ParseException", "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC'."), True),
    (named("AnalysisException", "[UNRESOLVED_COLUMN.WITH_SUGGESTION] ... `dep_dely` ..."),
     True),
    (named("AnalysisException", "[PATH_NOT_FOUND] Path does not exist: file:/d/x."), False),
    (named("SparkException", "[FAILED_READ_FILE.PARQUET_COLUMN_DATA_TYPE_MISMATCH] ..."), True),
    (named("Py4JJavaError", "java.lang.OutOfMemoryError: Java heap space"), False),
    (named("Py4JNetworkError", "Answer from Java side is empty"), False),
    (ValueError("bad row 500"), False),
    # raise_error() / assert_true() in the job's SQL, as Spark 4 reports them.
    (named("SparkRuntimeException", "[USER_RAISED_EXCEPTION] bad EV SQLSTATE: P0001"), True),
])
def test_only_what_a_retry_cannot_fix_is_permanent(exc: Exception, permanent: bool) -> None:
    assert is_permanent(exc) is permanent


def test_an_unknown_data_job_task_is_a_permanent_failure() -> None:
    from core.pipeline.errors import DataJobError
    from core.pipeline.tasks import datajob

    with pytest.raises(DataJobError) as failed:
        datajob({"op": "merge", "job": "J", "spec": {}}, None)  # type: ignore[arg-type]
    assert str(failed.value) == ("unknown data job task 'merge': expected split, chunk or "
                                 "combine")
    assert failed.value.permanent  # another attempt runs the same payload

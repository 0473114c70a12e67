"""What the three steps of a data job (split, chunk, combine) share on their worker: the
step's Spark session (sparking: the job's FAIR pool, a cancel or a lost lease stops its Spark
jobs, Spark's errors as messages that say what to change) and the job's transformation of a
chunk (transform: its SQL over `chunk`, or its registered transform).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from core.tracing import stages
from core.worker.context import Cancelled, TaskContext, Unavailable

from . import check, io, spark_query, spark_sessions, spark_target, transforms
from . import progress as spark_progress
from .errors import DataJobError, JvmDied, explain, is_permanent, jvm_died, short
from .spec import JobSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("queueadmin.pipeline")


def _where(spec: JobSpec, payload: dict[str, Any]) -> str:
    op = payload.get("op")
    what = f"chunk {payload['chunk']}" if op == "chunk" else f"the {op}"
    return f"{what} of job {spec.job_id}"


@contextlib.contextmanager
def sparking(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext,
             meter: spark_progress.Meter | None = None) -> Iterator[SparkSession]:
    """The task's session, whose Spark jobs run in the job's FAIR pool and stop on a cancel or
    a lost lease (and whose bytes Spark reports go into `meter`, if given); Spark's errors
    become messages that say what to change. When the Spark Connect server is away
    (restarted, unreachable), the task goes back to waiting without spending an attempt
    (Unavailable) and the worker waits for the server. A dead classic JVM
    makes the worker exit (SIGTERM to itself: it finishes or releases its other tasks) so that
    its supervisor starts a fresh one; this task fails and runs again elsewhere."""
    where = _where(spec, payload)
    target = spark_target.target_from_settings()
    try:
        session = spark_sessions.session_for_task(target)
    except Exception as exc:
        if target.remote:
            spark_sessions.forget_slot_session()
            raise Unavailable(f"{where}: Spark Connect at {target.description} does not "
                              f"answer ({short(exc, 200)})") from exc
        raise DataJobError(f"{where}: Spark did not start: {exc}") from exc
    tag = f"qa-{ctx.request_id}-{ctx.task_id}".replace(".", "-")
    try:
        with spark_query.cancellable(session, tag, lambda: ctx.stopping,
                                     pool=spark_query.job_pool(spec.job_id)), \
                spark_progress.reporting(session, tag, ctx.progress, meter), \
                stages.stage(str(payload.get("op")), spec.job_id, session,
                             chunk=payload.get("chunk"), task_tag=tag):  # its span (issue 38)
            yield session
    except (Cancelled, DataJobError, Unavailable):
        raise
    except Exception as exc:
        if ctx.stopping:
            # Cancelled, LeaseGone or Interrupted (the worker stops): the worker releases or
            # drops the task
            ctx.check()
        if target.remote and spark_sessions.connect_failure(exc):
            spark_sessions.forget_slot_session()
            raise Unavailable(f"{where}: the Spark Connect server went away or was restarted "
                              f"({short(exc, 200)})") from exc
        if not target.remote and jvm_died(exc):
            spark_sessions.forget_dead_session()
            log.error("spark JVM died in %s: stopping this worker for a restart", where)
            os.kill(os.getpid(), signal.SIGTERM)
            raise JvmDied(explain(exc, where=where)) from exc
        raise DataJobError(explain(exc, where=where), permanent=is_permanent(exc)) from exc


def transform(session: SparkSession, spec: JobSpec, df: DataFrame,
               statements: check.Statements, views: dict[str, DataFrame] | None = None,
               ) -> DataFrame:
    """The chunk's result: the job's SQL over `chunk` and its views (`views`: read already),
    or its registered transform."""
    if statements.sql is not None:
        views = io.view_frames(session, spec) if views is None else views
        return spark_query.sql_over(session, statements.sql.text, {"chunk": df, **views})
    df.createOrReplaceTempView("chunk")  # a transform reaches them by name, as before
    io.register_views(session, spec)
    fn = transforms.get(spec.transform or "")
    if fn is None:
        raise DataJobError(f"transform {spec.transform!r} is not registered in this worker: "
                           "add its module to QA_HANDLER_MODULES and restart the workers")
    return fn(df)


def added_ms(ctx: TaskContext) -> int | None:
    """When the engine added the task to its request (its stream entry's id is that time, in
    ms of Redis's clock); None for an id that carries none. With the task's start, its queue
    wait (a retried task's counts from its first add)."""
    head = ctx.task_id.split("-", 1)[0]
    return int(head) if head.isdigit() else None


def timing(ctx: TaskContext, started_ms: int) -> dict[str, int | None]:
    """A step's place in the job's time (the job page's bars): when it started (ms) and how
    long it waited in the queue before (ms, from added_ms: never below 0, as the worker's
    clock and Redis's may differ by a little)."""
    added = added_ms(ctx)
    return {"started_ms": started_ms,
            "queued_ms": None if added is None else max(0, started_ms - added)}

"""The three tasks of a data job, run by workers under the handler `datajob` (see jobs.py):
split (split.py: plan the chunks from the input's metadata and add one task per chunk), chunk
(chunk.py: read its slice where it is, transform it, write its part, idempotently) and combine
(combine.py: parts -> output, manifest, `_SUCCESS`); what they share is in step.py. This
module registers the handler (QUEUEADMIN_HANDLER_MODULES names it) and hands each task to its
step.

Every task checks its job again before running (check.confine): a task in Redis is not
trusted, so its paths must lie under the data roots and its SQL must pass the SQL check; Spark
runs the checked SQL's text, never the text as typed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from core.queue import read
from core.worker.context import Cancelled, TaskContext
from core.worker.registry import handler

from . import check, jobs, spark_sessions, spark_target
from .chunk import chunk
from .combine import combine
from .errors import DataJobError
from .spec import JobSpec, SpecError
from .split import split


def _expected() -> bool:
    return spark_target.target_from_settings().expected


@handler(jobs.HANDLER, ready=spark_sessions.not_ready, at_start=_expected)
def datajob(payload: dict[str, Any], ctx: TaskContext) -> dict[str, Any] | None:
    """Run one task of a data job: payload {"op": split|chunk|combine, "job", ...}."""
    op = payload.get("op") if isinstance(payload, dict) else None
    run: Callable[[JobSpec, dict[str, Any], TaskContext, check.Statements],
                  dict[str, Any] | None] | None = {
        "split": split, "chunk": chunk, "combine": combine}.get(str(op))
    if run is None:
        raise DataJobError(f"unknown data job task {op!r}: expected split, chunk or combine",
                           permanent=True)
    spec = _spec_of(payload, ctx)
    job = str(payload.get("job", ""))
    try:
        if spec.job_id != job or ctx.request_id not in (job, jobs.combine_id(job)):
            raise SpecError(f"its spec is of job {spec.job_id!r}, not of this task's job")
        statements = check.confine(spec)
    except SpecError as exc:
        raise DataJobError(f"{_where_task(payload, ctx)} refused: {exc}",
                           permanent=True) from exc
    if op in ("split", "chunk"):
        _not_cancelled(spec, payload, ctx)
    try:
        return run(spec, payload, ctx, statements)
    except Cancelled:
        if ctx.cancelled:  # the job was cancelled: its staging goes once its tasks stop
            jobs.clean_when_stopped(ctx.queue, spec.job_id)
        raise


def _not_cancelled(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext) -> None:
    """Refuse a split or chunk of a job that an operator cancelled after it failed: the job's
    own request had ended (failed), so only its combine step could be cancelled, and a dead
    letter of it requeued later would run again for a combine that never comes, writing
    staging data nobody reads."""
    stopped = ("cancelled", "cancelling")
    combine_id = jobs.combine_id(spec.job_id)
    found = read.requests_many(ctx.queue, [ctx.request_id, combine_id])  # one round trip
    own, combine = found.get(ctx.request_id), found.get(combine_id)
    if own is not None and own.state in stopped:
        return  # a cancel of the running job: the task stops as any cancelled task does
    if combine is not None and combine.state in stopped:
        raise DataJobError(f"{_where_task(payload, ctx)} not run: the job was cancelled "
                           "(its combine step is); submit it again to run it", permanent=True)


def _spec_of(payload: dict[str, Any], ctx: TaskContext) -> JobSpec:
    """The task's job: from the payload (split, combine), else from the job's record."""
    raw = payload.get("spec")
    if raw is None:
        job = str(payload.get("job", ""))
        text = jobs.records(ctx.queue).get(job, "spec")
        if text is None:
            raise DataJobError(f"task of data job {job!r}: the job's record is gone (expired "
                               "after 7 days): submit the job again", permanent=True)
        raw = json.loads(text)
    try:
        return JobSpec.from_dict(raw)
    except (TypeError, ValueError, AttributeError) as exc:
        raise DataJobError(f"a data job task whose spec is not one: {exc}",
                           permanent=True) from exc


def _where_task(payload: dict[str, Any], ctx: TaskContext) -> str:
    """Which task this is, from what the engine knows of it (its request), not its spec."""
    op = payload.get("op")
    what = f"chunk {payload.get('chunk')}" if op == "chunk" else f"the {op}"
    return f"{what} of job {ctx.request_id.removesuffix('.combine')}"

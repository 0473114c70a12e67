"""A data job's submit (core.ops.datajobs, core.pipeline.submission): the same checks, in the
same words, as `datajob submit` and the console's form; refused (and audited) before the spec
is read when the token may not submit data jobs."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.http import Http404, HttpRequest
from ninja import Field, Router, Status
from ninja.params.functions import Query

from core import tracing
from core.models.datajobs import DataJob
from core.ops import datajobs as ops
from core.ops.errors import BadInput
from core.pipeline.spec import SpecError

from .common import actor, known_queue, outcome, reader, valid_id
from .requests import REFUSALS
from .schemas import ID_MAX, ActionOut, Body

router = Router(tags=["data jobs"])


class DataJobIn(Body):
    input: str = Field(..., max_length=4096, description="a path or glob under the data roots")
    output: str = Field(..., max_length=4096, description="a directory under the output roots")
    format: str | None = Field(None, max_length=20, description="csv, json or parquet")
    output_format: str = Field("parquet", max_length=20)
    sql: str | None = Field(None, max_length=100_000, description="Spark SQL over `chunk`")
    transform: str | None = Field(None, max_length=200, description="a registered transform")
    combine_sql: str | None = Field(None, max_length=100_000, description="over `parts`")
    views: list[str] = Field(default_factory=list, max_length=50,
                             description="NAME=PATH read-only views")
    chunks: int | None = Field(None, ge=1, le=100_000)
    rows_per_chunk: int | None = Field(None, ge=1, le=10**12)
    overwrite: bool = False
    request_id: str | None = Field(None, max_length=ID_MAX)
    partition_by: list[str] = Field(default_factory=list, max_length=20)
    mode: str | None = Field(None, max_length=20)
    priority: int | None = Field(None, ge=0, le=99)
    concurrency: int | None = Field(None, ge=1, le=1_000_000)
    tenant: str | None = Field(None, max_length=ID_MAX)
    max_attempts: int | None = Field(None, ge=1, le=1000)
    delay_s: float | None = Field(None, ge=0, le=366 * 86_400)


@router.post("/queues/{queue}/datajobs", response={201: dict[str, Any], **REFUSALS},
             summary="Submit a data job (operate)")
def submit_datajob(request: HttpRequest, queue: str, body: DataJobIn) -> Any:
    """Its chunks and its combine step, as `datajob submit` queues them; `created` false when
    a job of that id was submitted before, or (`same_output`) another job writes that output
    and has not finished (its id is returned)."""
    from core.pipeline import submission

    who = actor(request)
    valid_id(queue, "queue name")
    ops.require(who, ops.SUBMIT, ops.SUBMIT_PERMISSION, queue, "a data job (HTTP API)")
    try:
        options = submission.queue_options(
            priority=body.priority, concurrency=body.concurrency, tenant=body.tenant,
            max_attempts=body.max_attempts)
        spec = submission.job_spec(
            input=body.input, format=body.format, output=body.output,
            output_format=body.output_format, sql=body.sql, transform=body.transform,
            combine_sql=body.combine_sql, views=body.views, chunks=body.chunks,
            rows_per_chunk=body.rows_per_chunk, overwrite=body.overwrite,
            request_id=body.request_id, partition_by=body.partition_by, mode=body.mode)
        # A traceparent header: the parent of the job's submit span while tracing is on.
        with tracing.incoming(request.headers.get("traceparent")):
            done = ops.submit(who, queue, spec, options, delay=body.delay_s)
    except SpecError as exc:
        raise BadInput(str(exc)) from None
    return Status(201, {"job_id": done.job_id, "created": done.created,
                        "same_output": done.same_output, "no_worker": done.no_worker,
                        "paused": done.paused, "warming": done.warming,
                        "audit_id": done.audit_id})


@router.get("/queues/{queue}/datajobs", response={200: dict[str, Any], **REFUSALS},
            summary="A queue's data jobs, newest first (page with ?after=<next>)")
def list_datajobs(request: HttpRequest, queue: str,
                  after: str | None = Query(None, max_length=40),
                  count: int = Query(50, ge=1, le=500)) -> Any:
    """From the database (the mirror's copy, kept as retention says), as the console's list
    pages them; a job not finished there is read live from Redis."""
    from core.console import datajobs as shown
    from core.console.paging import db_cursor, keyset

    reader(request)
    q = known_queue(queue)
    rows = DataJob.objects.filter(queue=q.name).only(*shown.LIST_COLUMNS)
    paged: Any = keyset(rows, "created_at", db_cursor(request), limit=count)
    return {"jobs": [{"job_id": j.job_id, "state": j.state, "chunks": j.chunks,
                      "chunks_done": j.done_chunks, "finished": j.finished,
                      "created_at": j.created_at.isoformat(),
                      "spec": j.spec.to_dict() if j.spec is not None else None}
                     for j in shown.listed(q, list(paged.items))],
            "next": paged.next}


@router.get("/queues/{queue}/datajobs/{job_id}", response={200: dict[str, Any], **REFUSALS},
            summary="A data job's state, chunks' reports, failures and manifest (from Redis "
                    "while it has the job, then from the database)")
def get_datajob(request: HttpRequest, queue: str, job_id: str) -> Any:
    from core.console import datajobs as shown

    reader(request)
    q = known_queue(queue)
    jid = valid_id(job_id, "job id")
    got = shown.shown(q, jid)
    if got is None:
        raise Http404(f"no data job {jid!r} in queue {q.name!r}")
    st, facts = got
    return {"job_id": st.job_id, "state": st.state, "finished": st.finished,
            "chunks": st.chunks, "cancelled": st.cancelled, "failures": st.failures,
            "manifest": st.manifest, "source": facts.source,
            "split_how": facts.split_how, "input_rows": facts.input_rows,
            "split_seconds": facts.split_seconds,
            "spec": st.spec.to_dict() if st.spec is not None else None,
            "reports": [dataclasses.asdict(r) for _, r in sorted(st.reports.items())],
            "dead_letters": [d.id for d in st.letters]}


class CleanIn(Body):
    dry_run: bool = False


@router.post("/queues/{queue}/staging/clean", response={200: dict[str, Any], **REFUSALS},
             summary="Remove the staging data of cancelled or expired jobs (operate)")
def clean_datajobs(request: HttpRequest, queue: str, body: CleanIn) -> Any:
    """Never of a running, held, failed or done job; `dry_run` says what would go."""
    valid_id(queue, "queue name")
    done = ops.clean(actor(request), queue, dry_run=body.dry_run)
    return {"queue": done.queue, "dry_run": done.dry_run, "audit_id": done.audit_id,
            "removed": [{"job_id": c.job_id, "state": c.state,
                         "staging": str(c.staging) if c.staging else None,
                         "removed_bytes": c.removed_bytes, "leased": c.leased}
                        for c in done.removed]}


@router.post("/queues/{queue}/datajobs/{job_id}/cancel", response={200: ActionOut, **REFUSALS},
             summary="Cancel a data job: both its requests, then its staging data (operate)")
def cancel_datajob(request: HttpRequest, queue: str, job_id: str) -> Any:
    valid_id(queue, "queue name")
    return outcome(ops.cancel(actor(request), queue, job_id, wait_s=0.0))

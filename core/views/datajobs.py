"""Data jobs (issue 9): every job of the queue newest first, each with its progress per chunk
(from the database, by keyset: issue 35); a job's page with its SQL, split, EXPLAIN, chunks,
manifest and the first rows of its output, from Redis while it has the job and from the
database after (core.console.datajobs.shown); a submit form
checked like `datajob submit` as far as it can be without Spark (the web process never starts
a JVM: Spark's own analysis of the SQL happens in the split task, and a failure there shows
on the job's page). The job's requests stay ordinary requests on every other page."""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.conf import DEFAULT_QUEUE
from core.console import datajobs
from core.console.paging import db_cursor, keyset
from core.console.queues import queue_from
from core.models.datajobs import DataJob
from core.ops import datajobs as ops
from core.ops.audit import as_actor
from core.ops.errors import BadInput, Refused
from core.pipeline import jobs, submission, transforms
from core.pipeline.jobs import QueueOptions
from core.pipeline.spec import FORMATS, MODES, OUTPUT_FORMATS, JobSpec, SpecError
from core.queue import Queue
from core.queue.errors import InvalidInput
from core.queue.keys import validate_id

from .common import PERMISSION, console_page, page

PAGE = 20
# The form's fields (text as typed; `overwrite` is a checkbox) and the CLI option each stands
# for: the refusals name options, the page shows the message at the field.
OPTION_FIELDS = {
    "--input": "input", "--format": "format", "--view": "views", "--sql": "sql",
    "--transform": "transform", "--combine-sql": "combine_sql", "--output": "output",
    "--output-format": "output_format", "--chunks": "chunks",
    "--rows-per-chunk": "rows_per_chunk", "--priority": "priority",
    "--concurrency": "concurrency", "--tenant": "tenant", "--max-attempts": "max_attempts",
    "--request-id": "request_id", "--overwrite": "output", "--partition-by": "partition_by",
    "--mode": "mode", "--incremental": "output", "--content-hash": "output",
}
FIELDS = tuple(f for f in dict.fromkeys(OPTION_FIELDS.values()))


@console_page
def job_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    context, live = _listing(request, queue)
    context |= {"form": _blank_form(), "can_submit": request.user.has_perm(ops.SUBMIT_PERMISSION)}
    return page(request, "core/datajobs.html", queue, context, nav="datajobs", live=live)


def _listing(request: HttpRequest, queue: Queue) -> tuple[dict[str, Any], bool]:
    """The page of jobs the request asks for, and whether it is live (the first page polls):
    the list's context, shared by the list and by a refused submit, which shows it too."""
    qs = DataJob.objects.filter(queue=queue.name).only(*datajobs.LIST_COLUMNS)
    after = db_cursor(request)
    paged: Any = keyset(qs, "created_at", after, limit=PAGE)
    return {"jobs": datajobs.listed(queue, list(paged.items)), "paged": paged}, after is None


@console_page
def job_detail(request: HttpRequest, queue_name: str, job_id: str) -> HttpResponse:
    queue = queue_from(request, name=queue_name)
    try:
        validate_id(job_id, "job id")
    except InvalidInput as exc:
        raise Http404(str(exc)) from exc
    got = datajobs.shown(queue, job_id)
    if got is None or got[0].spec is None:
        raise Http404(f"No data job {job_id!r} in queue {queue.name!r}.")
    st, facts = got
    chunks = datajobs.chunks_of(st, datajobs.running_chunks(queue, st) if facts.live
                                else frozenset())
    context = {
        "job": st, "facts": facts, "chunks": chunks, "progress": datajobs.progress(st, chunks),
        "unsplit": datajobs.unsplit(st), "manifest": datajobs.manifest_text(st),
        "preview": datajobs.preview(st.spec), "times": datajobs.time_bars(st, facts),
    }
    return page(request, "core/datajob.html", queue, context, nav="datajobs",
                live=not st.finished)


@require_POST
def job_submit(request: HttpRequest) -> HttpResponse:
    actor = as_actor(request.user)
    try:  # refused (and audited) before the form is read
        ops.require(actor, ops.SUBMIT, ops.SUBMIT_PERMISSION,
                    request.GET.get("queue") or DEFAULT_QUEUE, "a data job (console form)")
    except Refused:
        raise PermissionDenied from None
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    queue = queue_from(request)
    form = _posted(request)
    try:
        spec, options = _checked(form)
        done = ops.submit(actor, queue.name, spec, options)
    except (SpecError, BadInput) as exc:  # BadInput: the job's id is another request's
        # The list above the form as GET /jobs/ shows it; its poll and pager go to the list's
        # address, not this one (a GET of /jobs/submit/ is a 405).
        context, live = _listing(request, queue)
        context |= {
            "form": _blank_form() | form, "error": str(exc),
            "error_field": _field_of(str(exc)), "can_submit": True,
            "list_url": reverse("core:datajobs"),
        }
        return page(request, "core/datajobs.html", queue, context, nav="datajobs",
                    status=400, live=live)
    _say(request, done)
    url = reverse("core:datajob", args=[queue.name, done.job_id])  # another's: same output
    return HttpResponseRedirect(f"{url}?queue={queue.name}")


def _say(request: HttpRequest, done: ops.Submitted) -> None:
    """What the submit did, and why the job may wait, as messages on the job's page."""
    if done.same_output:
        messages.info(request, f"Data job {done.job_id} writes that output and has not "
                               "finished: nothing new was submitted (this is that job).")
    elif not done.created:
        messages.info(request, f"Data job {done.job_id} was submitted before: nothing changed.")
    if done.no_worker:
        messages.warning(request, f"No worker of queue {done.queue!r} runs data jobs yet "
                                  f"(handler {jobs.HANDLER!r}): the job waits until one starts.")
    if done.paused:
        messages.warning(request, f"Queue {done.queue} is paused: this job waits until it is "
                                  "resumed.")
    if done.warming:
        messages.info(request, f"{done.warming}: this job waits for Spark (warming), and starts "
                               "once it is warm.")


def _posted(request: HttpRequest) -> dict[str, Any]:
    """The form's fields as typed (stripped), to check and to show again."""
    form: dict[str, Any] = {f: request.POST.get(f, "").strip() for f in FIELDS}
    form["overwrite"] = request.POST.get("overwrite") == "on"
    form["incremental"] = request.POST.get("incremental") == "on"
    form["content_hash"] = request.POST.get("content_hash") == "on"
    return form


def _checked(form: dict[str, Any]) -> tuple[JobSpec, QueueOptions]:
    """The form through the checks `datajob submit` makes (core.pipeline.submission): the
    same refusals in the same words; a blank field is an option not given."""
    options = submission.queue_options(
        priority=form["priority"], concurrency=form["concurrency"], tenant=form["tenant"],
        max_attempts=form["max_attempts"])
    spec = submission.job_spec(
        input=form["input"], format=form["format"],
        output=form["output"],
        output_format=form["output_format"] or "parquet", sql=form["sql"] or None,
        transform=form["transform"] or None, combine_sql=form["combine_sql"] or None,
        views=[v.strip() for v in form["views"].splitlines() if v.strip()],
        chunks=form["chunks"], rows_per_chunk=form["rows_per_chunk"],
        overwrite=form["overwrite"], request_id=form["request_id"] or None,
        partition_by=[form["partition_by"]], mode=form["mode"] or None,
        incremental=form["incremental"], content_hash=form["content_hash"])
    return spec, options


def _field_of(message: str) -> str | None:
    """The form field a refusal is about: the first CLI option its message names."""
    for field in ("input", "output"):
        if message.startswith(f"{field} "):
            return field
    m = re.search(r"--[a-z]+(?:-[a-z]+)*", message)
    return OPTION_FIELDS.get(m.group(0)) if m else None


def _blank_form() -> dict[str, Any]:
    transforms.load_modules()  # registered transforms, as `datajob submit` sees them
    d = QueueOptions()
    return {f: "" for f in FIELDS} | {
        "format": "", "output_format": "parquet", "overwrite": False, "mode": "overwrite",
        "incremental": False, "content_hash": False,
        "modes": MODES, "formats": FORMATS, "output_formats": OUTPUT_FORMATS,
        "transforms": transforms.names(),
        "defaults": d,
    }

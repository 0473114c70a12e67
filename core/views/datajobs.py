"""Data jobs (issue 9): every job of the queue newest first, each with its progress per chunk;
a job's page with its SQL, chunks, manifest and the first rows of its output; a submit form
checked like `datajob submit` as far as it can be without Spark (the web process never starts
a JVM: Spark's own analysis of the SQL happens in the split task, and a failure there shows
on the job's page). The job's requests stay ordinary requests on every other page."""

from __future__ import annotations

import re
import warnings
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
from core.models import Request
from core.ops import audit
from core.ops.audit import as_actor
from core.pipeline import jobs, submission, transforms
from core.pipeline.jobs import QueueOptions
from core.pipeline.spec import FORMATS, OUTPUT_FORMATS, JobSpec, SpecError
from core.queue import Queue
from core.queue.errors import InvalidInput, UnknownHandlerWarning
from core.queue.keys import validate_id

from .common import PERMISSION, console_page, page

SUBMIT_PERMISSION = "core.submit_datajob"
PAGE = 20
AUDIT_ACTION = "datajob"
# The form's fields (text as typed; `overwrite` is a checkbox) and the CLI option each stands
# for: the refusals name options, the page shows the message at the field.
OPTION_FIELDS = {
    "--input": "input", "--format": "format", "--view": "views", "--sql": "sql",
    "--transform": "transform", "--combine-sql": "combine_sql", "--output": "output",
    "--output-format": "output_format", "--chunks": "chunks",
    "--rows-per-chunk": "rows_per_chunk", "--priority": "priority",
    "--concurrency": "concurrency", "--tenant": "tenant", "--max-attempts": "max_attempts",
    "--request-id": "request_id", "--overwrite": "output",
}
FIELDS = tuple(f for f in dict.fromkeys(OPTION_FIELDS.values()))


@console_page
def job_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    context, live = _listing(request, queue)
    context |= {"form": _blank_form(), "can_submit": request.user.has_perm(SUBMIT_PERMISSION)}
    return page(request, "core/datajobs.html", queue, context, nav="datajobs", live=live)


def _listing(request: HttpRequest, queue: Queue) -> tuple[dict[str, Any], bool]:
    """The page of jobs the request asks for, and whether it is live (the first page polls):
    the list's context, shared by the list and by a refused submit, which shows it too."""
    qs = Request.objects.filter(queue=queue.name, handler=jobs.HANDLER).exclude(
        request_id__endswith=".combine")
    after = db_cursor(request)
    paged: Any = keyset(qs, "created_at", after, limit=PAGE)
    rows = []
    for r in paged.items:
        st = datajobs.status(queue, r.request_id)
        done = sum(1 for c in datajobs.chunks_of(st) if c.state == "done")
        rows.append({"request": r, "status": st, "done_chunks": done})
    return {"jobs": rows, "paged": paged}, after is None


@console_page
def job_detail(request: HttpRequest, queue_name: str, job_id: str) -> HttpResponse:
    queue = queue_from(request, name=queue_name)
    try:
        validate_id(job_id, "job id")
    except InvalidInput as exc:
        raise Http404(str(exc)) from exc
    st = datajobs.status(queue, job_id)
    if st.spec is None:
        raise Http404(f"No data job {job_id!r} in queue {queue.name!r} (or its record expired).")
    chunks = datajobs.chunks_of(st, datajobs.running_chunks(queue, st))
    context = {
        "job": st, "chunks": chunks, "progress": datajobs.progress(st, chunks),
        "unsplit": datajobs.unsplit(st), "manifest": datajobs.manifest_text(st),
        "preview": datajobs.preview(st.spec),
    }
    return page(request, "core/datajob.html", queue, context, nav="datajobs",
                live=not st.finished)


@require_POST
def job_submit(request: HttpRequest) -> HttpResponse:
    actor = as_actor(request.user)
    if not request.user.has_perm(PERMISSION) or not audit.may(actor, SUBMIT_PERMISSION):
        audit.record(actor, AUDIT_ACTION, request.GET.get("queue") or DEFAULT_QUEUE,
                     target="a data job (console form)", count=1, refused=True,
                     error=f"{actor.name} lacks the permission {SUBMIT_PERMISSION}")
        raise PermissionDenied
    queue = queue_from(request)
    form = _posted(request)
    try:
        spec, options = _checked(form)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UnknownHandlerWarning)
            # JobIdTaken (a SpecError), with nothing written, if the id is another request's.
            created = jobs.submit(queue, spec, options)
    except SpecError as exc:
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
    audit.record(actor, AUDIT_ACTION, queue.name,
                 target=f"data job {spec.job_id}: {spec.input} -> {spec.output}", count=1,
                 acted=int(created), skipped=int(not created))
    if not created:
        messages.info(request, f"Data job {spec.job_id} was submitted before: nothing changed.")
    if caught:
        messages.warning(request, f"No worker of queue {queue.name!r} runs data jobs yet "
                                  f"(handler {jobs.HANDLER!r}): the job waits until one starts.")
    url = reverse("core:datajob", args=[queue.name, spec.job_id])
    return HttpResponseRedirect(f"{url}?queue={queue.name}")


def _posted(request: HttpRequest) -> dict[str, Any]:
    """The form's fields as typed (stripped), to check and to show again."""
    form: dict[str, Any] = {f: request.POST.get(f, "").strip() for f in FIELDS}
    form["overwrite"] = request.POST.get("overwrite") == "on"
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
        overwrite=form["overwrite"], request_id=form["request_id"] or None)
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
        "format": "", "output_format": "parquet", "overwrite": False,
        "formats": FORMATS, "output_formats": OUTPUT_FORMATS, "transforms": transforms.names(),
        "defaults": d,
    }

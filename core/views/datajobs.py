"""Data jobs (issue 9): every job of the queue newest first, each with its progress per chunk;
a job's page with its SQL, chunks, manifest and the first rows of its output; a submit form
checked like `datajob submit` as far as it can be without Spark (the web process never starts
a JVM: Spark's own analysis of the SQL happens in the split task, and a failure there shows
on the job's page). The job's requests stay ordinary requests on every other page."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.console import datajobs
from core.console.paging import db_cursor, keyset
from core.console.queues import queue_from
from core.models import Request
from core.pipeline import jobs, transforms
from core.pipeline.spec import FORMATS, OUTPUT_FORMATS, SpecError, make_spec, parse_views
from core.queue.errors import InvalidInput
from core.queue.keys import validate_id
from core.queue.produce import new_request_id

from .common import PERMISSION, console_page, page

SUBMIT_PERMISSION = "core.submit_datajob"
PAGE = 20
FIELDS = ("input", "format", "views", "sql", "combine_sql", "output", "output_format", "chunks")


@console_page
def job_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    qs = Request.objects.filter(queue=queue.name, handler=jobs.HANDLER).exclude(
        request_id__endswith=".combine")
    after = db_cursor(request)
    paged: Any = keyset(qs, "created_at", after, limit=PAGE)
    rows = []
    for r in paged.items:
        st = datajobs.status(queue, r.request_id)
        done = sum(1 for c in datajobs.chunks_of(st) if c.state == "done")
        rows.append({"request": r, "status": st, "done_chunks": done})
    context = {"jobs": rows, "paged": paged, "form": _blank_form(),
               "can_submit": request.user.has_perm(SUBMIT_PERMISSION)}
    return page(request, "core/datajobs.html", queue, context, nav="datajobs",
                live=after is None)


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
    context = {
        "job": st, "chunks": datajobs.chunks_of(st), "manifest": datajobs.manifest_text(st),
        "preview": datajobs.preview(st.spec),
    }
    return page(request, "core/datajob.html", queue, context, nav="datajobs",
                live=not st.finished)


@require_POST
def job_submit(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm(PERMISSION) or not request.user.has_perm(SUBMIT_PERMISSION):
        raise PermissionDenied
    queue = queue_from(request)
    form = {f: request.POST.get(f, "").strip() for f in FIELDS}
    try:
        spec = _spec(form)
    except SpecError as exc:
        context: dict[str, Any] = {"jobs": [], "paged": None, "form": _blank_form() | form,
                   "error": str(exc), "can_submit": True}
        return page(request, "core/datajobs.html", queue, context, nav="datajobs",
                    status=400, live=False)
    jobs.submit(queue, spec)
    url = reverse("core:datajob", args=[queue.name, spec.job_id])
    return HttpResponseRedirect(f"{url}?queue={queue.name}")


def _spec(form: dict[str, str]) -> Any:
    """The checks of `datajob submit` that need no Spark, on the form's fields."""
    if not form["input"] or not form["output"]:
        raise SpecError("input and output are required")
    chunks = None
    if form["chunks"]:
        if not form["chunks"].isdecimal() or len(form["chunks"]) > 6:
            raise SpecError(f"chunks {form['chunks']!r}: a whole number")
        chunks = int(form["chunks"])
    transforms.load_modules()
    return make_spec(
        job_id=new_request_id(), input=form["input"], format=form["format"],
        output=form["output"], output_format=form["output_format"] or "parquet",
        sql=form["sql"] or None, combine_sql=form["combine_sql"] or None,
        views=parse_views(form["views"].split()), chunks=chunks,
    )


def _blank_form() -> dict[str, Any]:
    return {f: "" for f in FIELDS} | {"format": "parquet", "output_format": "parquet",
                                      "formats": FORMATS, "output_formats": OUTPUT_FORMATS}

"""A data job's steps as spans (issue 38): its split, each chunk, its combine (a small job's
one step), each a child of its task's run, and its trace and span ids given to Spark as
operation tags (SparkSession.addTag: classic and Connect alike in PySpark 4), so that Spark's
UI and listeners can tell which trace a Spark job belongs to."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from .live import STATE

log = logging.getLogger("queueadmin.tracing")


@contextlib.contextmanager
def stage(step: str, job_id: str, session: Any, *, chunk: int | None = None,
          task_tag: str = "") -> Iterator[None]:
    """The block as the span "datajob <step>" of job `job_id` (chunk `chunk`), its ids as
    Spark operation tags on `session` meanwhile ("qa-trace-<trace id>", "qa-span-<span id>");
    nothing at all while tracing is off."""
    if STATE.tracer is None:
        yield
        return
    attrs: dict[str, Any] = {"queueadmin.datajob.id": job_id, "queueadmin.datajob.step": step}
    if chunk is not None:
        attrs["queueadmin.datajob.chunk"] = chunk
    with STATE.tracer.start_as_current_span(f"datajob {step}", attributes=attrs) as span:
        ctx = span.get_span_context()
        added = []
        for tag in (f"qa-trace-{ctx.trace_id:032x}", f"qa-span-{ctx.span_id:016x}"):
            try:
                session.addTag(tag)
                added.append(tag)
            except Exception as exc:  # a session that takes no tags: the span stays
                log.debug("spark tag %s not set: %s", tag, exc)
        # What its Spark operations carry: these tags, and the task's (step.sparking: a tag on
        # Spark Connect, the job group on classic Spark).
        span.set_attribute("spark.operation_tags", [*added, *([task_tag] if task_tag else [])])
        try:
            yield
        finally:
            for tag in added:
                with contextlib.suppress(Exception):
                    session.removeTag(tag)

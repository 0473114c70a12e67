"""What a person asks for when submitting a data job, checked once for every way in: the
options of `datajob submit` and the fields of the console's form both come here, so both
refuse the same things with the same words, in milliseconds: nothing here needs Spark (what
only Spark can tell, the split task finds).

Numbers may come as ints (argparse) or as text (a form); text that is not a whole number is
refused here, and the bounds are the engine's own (core.queue.base.int_in)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from core.queue.base import int_in
from core.queue.errors import InvalidInput
from core.queue.keys import validate_id
from core.queue.produce import DEFAULT_CONCURRENCY, MAX_ATTEMPTS, new_request_id

from . import transforms
from .check import make_spec
from .jobs import QueueOptions
from .roots import DataRoots
from .spec import JobSpec, SpecError, parse_views, view_format

MAX_JOB_ID = 120  # the combine follow-up appends ".combine" to a 128-character id
_INTEGER = re.compile(r"-?\d{1,12}")
Number = int | str | None


def whole(value: Number, option: str) -> int | None:
    """`value` as an int (None, or blank text, stays None); SpecError naming `option` for
    text that is not a whole number."""
    if value is None or isinstance(value, int):
        return value
    text = value.strip()
    if not text:
        return None
    if not _INTEGER.fullmatch(text):
        raise SpecError(f"{option} {value!r}: a whole number")
    return int(text)


def _bounded(value: Number, option: str, low: int, high: int, default: int) -> int:
    n = whole(value, option)
    try:
        return int_in(default if n is None else n, option, low, high)
    except InvalidInput as exc:
        raise SpecError(str(exc)) from None


def queue_options(*, priority: Number = None, concurrency: Number = None,
                  tenant: str | None = None, max_attempts: Number = None) -> QueueOptions:
    """The job's queue options (defaults where None or blank), within the engine's bounds;
    SpecError saying which option is wrong."""
    d = QueueOptions()
    tenant = (tenant or "").strip() or d.tenant
    try:
        validate_id(tenant, "tenant")
    except InvalidInput as exc:
        raise SpecError(f"--tenant: {exc}") from None
    return QueueOptions(
        priority=_bounded(priority, "--priority", 0, 99, d.priority),
        concurrency=_bounded(concurrency, "--concurrency", 1, DEFAULT_CONCURRENCY,
                             d.concurrency),
        tenant=tenant,
        max_attempts=_bounded(max_attempts, "--max-attempts", 1, MAX_ATTEMPTS, d.max_attempts),
    )


def job_id(request_id: str | None) -> str:
    """The id asked for (checked), or a new one."""
    if not request_id:
        return new_request_id()
    try:
        validate_id(request_id, "request id")
    except InvalidInput as exc:
        raise SpecError(f"--request-id: {exc}") from None
    if len(request_id) > MAX_JOB_ID:
        raise SpecError(f"--request-id {request_id!r}: at most {MAX_JOB_ID} characters for a "
                        "data job")
    return request_id


def job_spec(
    *, input: str, format: str | None, output: str, output_format: str = "parquet",
    sql: str | None = None, transform: str | None = None, combine_sql: str | None = None,
    views: Sequence[str] = (), chunks: Number = None, rows_per_chunk: Number = None,
    overwrite: bool = False, request_id: str | None = None, roots: DataRoots | None = None,
) -> JobSpec:
    """The job's spec after every check (check.make_spec: paths under the data roots, the
    SQL's tree, its columns against the input's metadata); SpecError saying what to change.
    `views` are NAME=PATH items; `sql`/`transform` None when not given; `format` None or
    empty: the input's name says it, as a --view's does."""
    if not input.strip():
        raise SpecError("--input is required: the path or glob of the data to read")
    if not output.strip():
        raise SpecError("--output is required: the directory to write the result to")
    n_chunks = whole(chunks, "--chunks")
    n_rows = whole(rows_per_chunk, "--rows-per-chunk")
    jid = job_id(request_id)
    transforms.load_modules()  # transforms register themselves on import
    return make_spec(job_id=jid, input=input, format=format or view_format(input),
                     output=output,
                     output_format=output_format, sql=sql, transform=transform,
                     combine_sql=combine_sql, views=parse_views(list(views)), chunks=n_chunks,
                     rows_per_chunk=n_rows, overwrite=overwrite, roots=roots)

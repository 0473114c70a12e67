"""What a person asks for when submitting a data job, checked once for every way in: the
options of `datajob submit` and the fields of the console's form both come here, so both
refuse the same things with the same words, in milliseconds: nothing here needs Spark (what
only Spark can tell, the split task finds).

Numbers may come as ints (argparse) or as text (a form); text that is not a whole number is
refused here, and the bounds are the engine's own (core.queue.base.int_in)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from core.queue.base import int_in
from core.queue.errors import InvalidInput
from core.queue.keys import validate_id
from core.queue.options import DEFAULT_CONCURRENCY, MAX_ATTEMPTS, new_request_id

from . import transforms
from .check import make_spec
from .jobs import QueueOptions
from .roots import DataRoots
from .spec import JobSpec, SpecError, is_local, local_path, parse_views, view_format

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
    input_may_be_missing: bool = False, partition_by: Sequence[str] = (),
    mode: str | None = None, incremental: bool = False, content_hash: bool = False,
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
    if transform is not None:  # transforms register themselves as their modules load
        # Only then: the handler modules (the pipeline's tasks, Spark's client code) took
        # 0.1-0.3 s of every `datajob submit` of a SQL job, which needs none of them.
        transforms.load_modules()
    return make_spec(job_id=jid, input=input, format=format or view_format(input),
                     output=output,
                     output_format=output_format, sql=sql, transform=transform,
                     combine_sql=combine_sql, views=parse_views(list(views)), chunks=n_chunks,
                     rows_per_chunk=n_rows, overwrite=overwrite, roots=roots,
                     input_may_be_missing=input_may_be_missing,
                     partition_by=partition_columns(partition_by),
                     mode=(mode or "").strip() or "overwrite", incremental=incremental,
                     content_hash=content_hash)


def partition_columns(items: Sequence[str]) -> list[str]:
    """--partition-by values (each may list several, separated by commas or spaces, as the
    console's field takes them) as a list of names; check.check_layout checks them."""
    if isinstance(items, str):
        items = [items]
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise SpecError(f"--partition-by {item!r}: a column name")
        out += [c for c in re.split(r"[\s,]+", item) if c]
    return out


# -- a schedule's data job: the same checks, on each slot's spec ------------------------------

SCHEDULE_OPTIONS = ("priority", "concurrency", "tenant", "max_attempts")
_TEXT = ("input", "output", "output_format")
_OPTIONAL_TEXT = ("format", "sql", "transform", "combine_sql", "mode")
_COUNTS = ("chunks", "rows_per_chunk")


def scheduled_job(fields: Mapping[str, Any], *, input_may_be_missing: bool = False,
                  roots: DataRoots | None = None) -> JobSpec:
    """A schedule's data job for one slot (Schedule.job_fields: its paths templated, nothing
    checked) after the very checks of `datajob submit` (job_spec), its paths resolved;
    SpecError saying what to change. Run when the schedule is saved (on its next slot, where
    `input_may_be_missing` spares an input templated with a slot to come) and again at each
    run, before anything is queued."""
    try:
        spec = JobSpec.from_dict(dict(fields))
    except (TypeError, ValueError) as exc:  # a field no job has; views that are no mapping
        raise SpecError(f"bad data job spec: {exc}") from None
    for name in _TEXT:
        if not isinstance(getattr(spec, name), str):
            raise SpecError(f"the data job's {name} must be text, got {getattr(spec, name)!r}")
    for name in _OPTIONAL_TEXT:
        if getattr(spec, name) is not None and not isinstance(getattr(spec, name), str):
            raise SpecError(f"the data job's {name} must be text, got {getattr(spec, name)!r}")
    for name in _COUNTS:
        value = getattr(spec, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise SpecError(f"the data job's {name} must be a whole number, got {value!r}")
    for name in ("overwrite", "incremental", "content_hash"):
        if not isinstance(getattr(spec, name), bool):
            raise SpecError(f"the data job's {name} must be true or false, got "
                            f"{getattr(spec, name)!r}")
    if not isinstance(spec.partition_by, list) or not all(
            isinstance(c, str) for c in spec.partition_by):
        raise SpecError("the data job's partition_by must be a list of column names, such as "
                        '["year", "month"]')
    if not isinstance(spec.views, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in spec.views.items()):
        raise SpecError("the data job's views must be an object of names to paths, such as "
                        '{"planes": "var/data/planes.parquet"}')
    return job_spec(
        input=spec.input, format=spec.format, output=spec.output,
        output_format=spec.output_format, sql=spec.sql, transform=spec.transform,
        combine_sql=spec.combine_sql, views=[f"{n}={p}" for n, p in spec.views.items()],
        chunks=spec.chunks, rows_per_chunk=spec.rows_per_chunk, overwrite=spec.overwrite,
        request_id=spec.job_id, roots=roots, input_may_be_missing=input_may_be_missing,
        partition_by=spec.partition_by, mode=spec.mode, incremental=spec.incremental,
        content_hash=spec.content_hash)


def scheduled_options(options: Mapping[str, Any]) -> QueueOptions:
    """A data job schedule's queue options (those of `datajob submit`: priority, concurrency,
    tenant, max attempts) within their bounds; SpecError for another or a bad one."""
    unknown = sorted(set(options) - set(SCHEDULE_OPTIONS))
    if unknown:
        raise SpecError(f"a data job schedule takes the options {', '.join(SCHEDULE_OPTIONS)}; "
                        f"not {', '.join(unknown)}")
    for name, value in options.items():
        if name != "tenant" and (isinstance(value, bool) or not isinstance(value, int | str)):
            raise SpecError(f"--{name.replace('_', '-')} {value!r}: a whole number")
        if name == "tenant" and not isinstance(value, str):
            raise SpecError(f"--tenant {value!r}: a name")
    return queue_options(priority=options.get("priority"),
                         concurrency=options.get("concurrency"),
                         tenant=options.get("tenant"), max_attempts=options.get("max_attempts"))


def absolute_paths(job: Mapping[str, Any]) -> dict[str, Any]:
    """A schedule's data job with its local paths made absolute (from the directory of whoever
    saves it, as `datajob submit` reads them), templates kept: its runs are submitted by the
    scheduler, from another directory."""
    def absolute(path: Any) -> Any:
        if not isinstance(path, str) or not path.strip() or not is_local(path):
            return path
        return os.path.abspath(os.path.expanduser(local_path(path)))

    out = dict(job)
    for key in ("input", "output"):
        out[key] = absolute(out.get(key))
    if isinstance(out.get("views"), dict):
        out["views"] = {n: absolute(p) for n, p in out["views"].items()}
    return {k: v for k, v in out.items() if k in job}

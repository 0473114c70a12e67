"""The three tasks of a data job, run by workers under the handler `datajob` (see jobs.py):
split (plan the chunks from the input's metadata and add one task per chunk), chunk (read its
slice where it is, transform it, write its part, idempotently) and combine (parts -> output,
manifest, `_SUCCESS`).

Every task checks its job again before running (check.confine): a task in Redis is not
trusted, so its paths must lie under the data roots and its SQL must pass the SQL check; Spark
runs the checked SQL's text, never the text as typed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import reduce
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.queue import RequestSealed, introspect
from core.worker.context import Cancelled, TaskContext, Unavailable
from core.worker.registry import handler

from . import check, io, jobs, jvm, plan, spark, transforms
from . import progress as spark_progress
from .errors import DataJobError, JvmDied, explain, is_permanent, jvm_died, short
from .spec import MANIFEST, SUCCESS, JobSpec, SpecError, is_local, written_by

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("queueadmin.pipeline")
ADD_BATCH = 500  # chunk tasks added to the request per call
INLINE_READ_BYTES = 8 * 1024  # a bigger chunk read (many files) lives in the job's record
WORKERS_LIVE_MS = 30_000  # a worker seen this recently counts for the free slots
MAX_PARTITIONS = 4096  # of a chunk's read, as the job's record may say


def _expected() -> bool:
    return spark.target_from_settings().expected


@handler(jobs.HANDLER, ready=spark.not_ready, at_start=_expected)
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
    found = introspect.requests_many(ctx.queue, [ctx.request_id, combine_id])  # one round trip
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


def _where(spec: JobSpec, payload: dict[str, Any]) -> str:
    op = payload.get("op")
    what = f"chunk {payload['chunk']}" if op == "chunk" else f"the {op}"
    return f"{what} of job {spec.job_id}"


@contextlib.contextmanager
def sparking(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext) -> Iterator[SparkSession]:
    """The task's session, whose Spark jobs run in the job's FAIR pool and stop on a cancel or
    a lost lease; Spark's errors become messages that say what to change. When the Spark
    Connect server is away (restarted, unreachable), the task goes back to waiting without
    spending an attempt (Unavailable) and the worker waits for the server. A dead classic JVM
    makes the worker exit (SIGTERM to itself: it finishes or releases its other tasks) so that
    its supervisor starts a fresh one; this task fails and runs again elsewhere."""
    where = _where(spec, payload)
    target = spark.target_from_settings()
    try:
        session = spark.session_for_task(target)
    except Exception as exc:
        if target.remote:
            spark.forget_slot_session()
            raise Unavailable(f"{where}: Spark Connect at {target.description} does not "
                              f"answer ({short(exc, 200)})") from exc
        raise DataJobError(f"{where}: Spark did not start: {exc}") from exc
    tag = f"qa-{ctx.request_id}-{ctx.task_id}".replace(".", "-")
    try:
        with spark.cancellable(session, tag, lambda: ctx.cancelled or ctx.lost,
                               pool=spark.job_pool(spec.job_id)), \
                spark_progress.reporting(session, tag, ctx.progress):
            yield session
    except (Cancelled, DataJobError, Unavailable):
        raise
    except Exception as exc:
        if ctx.cancelled or ctx.lost:
            ctx.check()  # raises Cancelled or LeaseGone: the worker releases or drops the task
        if target.remote and spark.connect_failure(exc):
            spark.forget_slot_session()
            raise Unavailable(f"{where}: the Spark Connect server went away or was restarted "
                              f"({short(exc, 200)})") from exc
        if not target.remote and jvm_died(exc):
            spark.forget_dead_session()
            log.error("spark JVM died in %s: stopping this worker for a restart", where)
            os.kill(os.getpid(), signal.SIGTERM)
            raise JvmDied(explain(exc, where=where)) from exc
        raise DataJobError(explain(exc, where=where), permanent=is_permanent(exc)) from exc


def _transform(session: SparkSession, spec: JobSpec, df: DataFrame,
               statements: check.Statements, views: dict[str, DataFrame] | None = None,
               ) -> DataFrame:
    """The chunk's result: the job's SQL over `chunk` and its views (`views`: read already),
    or its registered transform."""
    if statements.sql is not None:
        views = io.view_frames(session, spec) if views is None else views
        return spark.sql_over(session, statements.sql.text, {"chunk": df, **views})
    df.createOrReplaceTempView("chunk")  # a transform reaches them by name, as before
    io.register_views(session, spec)
    fn = transforms.get(spec.transform or "")
    if fn is None:
        raise DataJobError(f"transform {spec.transform!r} is not registered in this worker: "
                           "add its module to QA_HANDLER_MODULES and restart the workers")
    return fn(df)


# -- split -------------------------------------------------------------------------------


def split(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext,
          statements: check.Statements) -> None:
    """Plan the chunks from the input's metadata (plan.py), add one chunk task per chunk to
    the request, then seal it. A retry skips the chunks already added and keeps the plan its
    first run recorded.

    Spark analyses the job's statements here first (a statement Spark refuses fails here,
    once, and no chunk runs) and infers the input's schema for the chunks. A local Parquet
    input cut by row groups, once this worker knows its Spark has the project's reader, needs
    no schema (the chunks read row groups) and no listing by Spark: the plan comes from the
    footers, and Spark only analyses the statements (two round trips instead of five: the
    split of a small job went from 0.3-0.5 s to about 0.1 s)."""
    started = time.monotonic()
    q, rec = ctx.queue, jobs.records(ctx.queue)
    info = introspect.request(q, spec.job_id)
    added = max(0, (info.total if info else 1) - 1)  # tasks after the split itself
    listing = plan.list_input(spec)
    if listing is not None and not listing.files:
        raise DataJobError(f"the split of job {spec.job_id}: input {spec.input} holds no data "
                           "file (moved or deleted since the job was submitted?)")
    known = rec.get(spec.job_id, "plan")
    if known:
        recorded = json.loads(known)
        reads, how, rows = recorded["reads"], recorded["how"], recorded["rows"]
    else:
        slots = min(_free_slots(q), info.concurrency if info else 1)
        spark_at = spark.target_from_settings()
        target = spark_at.description
        reader = jvm.known_available(target)
        # A local Parquet input without partition folders: its footers, read once, give the
        # plan and the columns.
        footers = _footers(spec, listing, statements) \
            if listing is not None and listing.base is None and spec.format == "parquet" \
            else None
        planned = None
        if reader and footers is not None and listing is not None:
            planned = _plan(spec, listing, statements, reader, slots, footers)
            if planned[1] != "row groups":
                planned = None  # files or rows: the chunks read better with Spark's schema
        fields: dict[str, Any] = {"schema": "", "parts_schema": ""}
        if planned is None:
            with sparking(spec, payload, ctx) as session:
                spark.file_partitions(session, None)
                cores = spark.local_cores(session, spark_at)
                frame = io.footer_frame(session, footers) if footers is not None else None
                if frame is None:
                    frame = io.read_input(session, spec, listing.files if listing else None,
                                          base=listing.base if listing else None)
                if listing is None:  # remote: Spark lists the files
                    listing = plan.Listing(sorted(frame.inputFiles()))
                # The input's schema (a CSV's or JSON's inferred once here, as Spark's own
                # reader infers it, and given to every chunk).
                fields["schema"] = frame.schema.json()
                fields["parts_schema"] = _analyse(session, spec, frame, statements)
                reader = jvm.available_at(session, target)
            assert listing is not None
            planned = _plan(spec, listing, statements, reader, slots, footers)
        else:
            assert listing is not None and footers is not None  # a local input: listed above
            with sparking(spec, payload, ctx) as session:
                spark.file_partitions(session, None)
                cores = spark.local_cores(session, spark_at)
                frame = io.footer_frame(session, footers)
                if frame is None:
                    frame = io.read_input(session, spec, listing.files)
                fields["parts_schema"] = _analyse(session, spec, frame, statements)
        reads, how, rows = planned
        assert listing is not None
        # The chunks that run at once share Spark's cores (when it runs here): each is read in
        # its share of them.
        partitions = spark.chunk_partitions(cores, min(slots, len(reads)))
        rec.put(spec.job_id, {
            "chunks": len(reads), "rows": -1 if rows is None else rows, "split": how,
            "probe": listing.files[0], "partitions": partitions or "", **fields,
            "plan": json.dumps({"reads": reads, "how": how, "rows": rows})})
    n = len(reads)
    for first in range(added, n, ADD_BATCH):
        ctx.check()
        batch = range(first, min(n, first + ADD_BATCH))
        big = {k: reads[k] for k in batch if len(json.dumps(reads[k])) > INLINE_READ_BYTES}
        if big:
            rec.put(spec.job_id, {f"read:{k}": json.dumps(r) for k, r in big.items()})
        q.add(spec.job_id, [
            {"op": "chunk", "job": spec.job_id, "chunk": k,
             **({} if k in big else {"read": reads[k]})} for k in batch])
    with contextlib.suppress(RequestSealed):
        q.seal(spec.job_id)
    log.info("split job=%s rows=%s chunks=%d by %s of %s file(s) in %.2fs", spec.job_id,
             "?" if rows is None else f"{rows:,}", n, how,
             len(listing.files) if listing else "?",
             time.monotonic() - started)


def _analyse(session: SparkSession, spec: JobSpec, frame: DataFrame,
             statements: check.Statements) -> str:
    """Spark's analysis of the job's statements over `frame` (no data read): a statement Spark
    refuses raises here. Returns the parts' schema (JSON), which the combine reads them with."""
    views = io.view_frames(session, spec)
    result_schema = _transform(session, spec, frame.limit(0), statements, views).schema
    if statements.combine_sql is not None:
        parts = session.createDataFrame([], result_schema)
        combined = spark.sql_over(session, statements.combine_sql.text, {"parts": parts, **views})
        combined.schema  # noqa: B018  (analysed here)
    return result_schema.json()


def _footers(spec: JobSpec, listing: plan.Listing,
             statements: check.Statements) -> list[plan.InputFile]:
    """The local Parquet input's footers (row groups, the bytes of the columns the SQL reads,
    the schema)."""
    reads_cols = statements.sql.reads.get("chunk") if statements.sql and \
        statements.sql.reads else None
    try:
        return plan.read_footers(listing.files, sorted(reads_cols) if reads_cols else None)
    except plan.InputError as exc:  # no retry changes the file
        raise DataJobError(f"the split of job {spec.job_id}: {exc}", permanent=True) from exc
    except FileNotFoundError as exc:
        raise DataJobError(f"the split of job {spec.job_id}: a file is missing (moved or "
                           f"deleted since the job was submitted?): {exc}") from exc


def _plan(spec: JobSpec, listing: plan.Listing, statements: check.Statements, reader: bool,
          slots: int, footers: list[plan.InputFile] | None = None,
          ) -> tuple[list[dict[str, Any]], str, int | None]:
    """The chunks' reads, how the input was cut, and its rows (None when not known), for a job
    that can run on `slots` worker slots at once (`footers`: a local Parquet input's, if
    read already)."""
    local = is_local(spec.input)
    if spec.format == "parquet" and local:
        files = footers if footers is not None else _footers(spec, listing, statements)
        rows = sum(f.rows for f in files)
        work = sum(sum(f.group_bytes) for f in files)
        n = plan.chunk_count(spec, rows=rows, work_bytes=work, slots=slots)
        if listing.base is not None:  # partition columns: whole files, read by Spark's reader
            by_path = {f.path: f for f in files}
            weighed = [plan.InputFile(f.path, sum(f.group_bytes)) for f in files]
            reads = [{**r, "known_rows": sum(by_path[p].rows for p in r["files"])}
                     for r in plan.file_reads(weighed, n, listing.base)]
            return reads, "files", rows
        reads = plan.parquet_reads(files, n, None)
        if not reader:  # without the project's reader, row groups are read as rows
            reads = [_groups_as_rows(r, files) for r in reads]
        kinds = {next(iter(r.keys() - {"known_rows", "base"}), "files") for r in reads}
        how = ("rows" if "rows" in kinds else "row groups" if "groups" in kinds
               else "files")
        return reads, how, rows
    files = plan.sizes(listing.files) if local else [plan.InputFile(f, 1) for f in listing.files]
    work = sum(f.size for f in files)
    n = plan.chunk_count(spec, rows=None, work_bytes=work, slots=slots)
    if spec.format != "parquet" and local and reader and listing.base is None:
        return plan.range_reads(files, n), "byte ranges", None
    return plan.file_reads(files, n, listing.base), "files", None


def _groups_as_rows(read: dict[str, Any], files: list[plan.InputFile]) -> dict[str, Any]:
    if "groups" not in read:
        return read
    by_path = {f.path: f for f in files}
    rows = []
    for path, first, end in read["groups"]:
        edges = [0, *itertools.accumulate(by_path[path].group_rows)]
        rows.append([path, edges[first], edges[end]])
    return {"rows": rows, "known_rows": read.get("known_rows")}


def _free_slots(q: Any) -> int:
    """The task slots of the queue's live workers: the default chunking gives each a chunk
    (as many as the job's concurrency lets run at once)."""
    try:
        now = q.now_ms()
        page = introspect.workers(q, limit=200)
    except Exception:
        return 1
    live = [w for w in page.items if now - w.last_beat_ms < WORKERS_LIVE_MS]
    return max(1, sum(_slots(w.info) for w in live))


def _slots(info: Any) -> int:
    """A heartbeat's announced slots; 1 for anything odd (a heartbeat is not trusted)."""
    slots = info.get("slots") if isinstance(info, dict) else None
    return slots if isinstance(slots, int) and 1 <= slots <= 1024 else 1


# -- chunk -------------------------------------------------------------------------------


def chunk(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext,
          statements: check.Statements) -> dict[str, Any]:
    """Transform one chunk, read where it is, into its part: written to a temporary directory
    and renamed over the part, so a retry replaces its own part and never adds rows twice.
    Reports rows in and out, seconds, attempt and worker in the job's record (and as its
    result)."""
    k = int(payload["chunk"])
    started = time.monotonic()
    rec = jobs.records(ctx.queue)
    read = payload.get("read")
    record = rec.get_many(spec.job_id, ("schema", "probe", "partitions", "parts_schema",
                                        "parts_big"))
    if read is None:
        text = rec.get(spec.job_id, f"read:{k}")
        if text is None:
            raise DataJobError(f"chunk {k} of job {spec.job_id}: its plan is missing from the "
                               "job's record (expired?)", permanent=True)
        read = json.loads(text)
    try:
        check.read_paths(spec, _paths_of(read, record))
    except SpecError as exc:
        raise DataJobError(f"chunk {k} of job {spec.job_id} refused: {exc}",
                           permanent=True) from exc
    with sparking(spec, payload, ctx) as session:
        # Its share of the cores for the whole query: a chunk read in one partition
        # aggregates in one task too.
        partitions = _partitions_of(record)
        spark.shuffle_into(session, partitions)
        # Partitions fixed here and no --view to join: nothing for AQE to adapt.
        spark.adaptive(session, partitions is None or bool(spec.views))
        df = chunk_frame(session, spec, read, record)
        # Known from the Parquet footers; a CSV or JSON chunk's rows are not counted (Spark
        # reports no observation made below the result of a write).
        known = read.get("known_rows")
        result = _transform(session, spec, df, statements)
        target = spec.part_dir(k)
        tmp = io.temp_beside(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        rows_out, written_by = _write_part(session, spec, statements, record, result, tmp,
                                           ctx, k)
        rows_in = int(known) if known is not None else None
        ctx.check()  # not cancelled, still ours: only then does the part replace the old one
        io.replace_dir(tmp, target)
    report = {"chunk": k, "rows_in": rows_in, "rows_out": rows_out,
              "seconds": round(time.monotonic() - started, 3), "attempt": ctx.attempt,
              "worker": ctx.worker, "part_written_by": written_by}
    rec.put(spec.job_id, {f"chunk:{k}": json.dumps(report)})
    log.info("chunk job=%s chunk=%d rows_in=%s rows_out=%d attempt=%d in %.2fs", spec.job_id,
             k, "?" if rows_in is None else rows_in, rows_out, ctx.attempt, report["seconds"])
    return report


# A chunk's result that comes back to its worker (_returned) holds at most this many rows and
# bytes; past either, the job's later chunks leave their parts to Spark to write.
RETURNED_ROWS = 100_000
RETURNED_BYTES = 32 * 1024 * 1024


def _write_part(session: SparkSession, spec: JobSpec, statements: check.Statements,
                record: dict[str, Any], result: DataFrame, tmp: Path, ctx: TaskContext,
                k: int) -> tuple[int, str]:
    """Chunk k's part written in the new directory `tmp`: its rows, and who wrote it
    ("worker" or "spark"). An aggregate's result comes back to the worker over Arrow and is
    written here (_returned); otherwise Spark writes it, and a Parquet part's rows are
    counted from its footers. Eight chunks of the benchmark's 40M rows, two at a time from a
    script on the stack's server: 2.07 s this way, 2.29 s written by Spark and 2.52 s written
    by Spark with the rows counted by an Observation, as before (medians of 8 rounds; plain
    job 1.62 s)."""
    if _returns(session, spec, statements, record):
        table = _returned(spec, result, ctx)
        if table is not None:
            io.write_arrow(table, tmp)
            return int(table.num_rows), "worker"
    if spec.parts_format == "parquet":
        io.write(result, tmp, "parquet", one_file=False)
        return io.parquet_rows(tmp), "spark"
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    seen = Observation(f"rows_{k}")
    io.write(result.observe(seen, F.count(F.lit(1)).alias("rows")), tmp, spec.parts_format,
             one_file=False)
    return int(seen.get["rows"]), "spark"


def _returns(session: SparkSession, spec: JobSpec, statements: check.Statements,
             record: dict[str, Any]) -> bool:
    """Whether the chunk's result comes back to the worker: on Spark Connect, for a job whose
    parts only its combine step reads, whose chunk SQL aggregates, whose parts' columns Arrow
    and Parquet carry unchanged, and none of whose chunks has found its result too big."""
    from pyspark.sql.types import StructType

    if not (spark.is_connect(session) and spec.combine_sql and statements.sql is not None
            and statements.sql.aggregates and record.get("parts_schema")
            and not record.get("parts_big")):
        return False
    try:
        schema = StructType.fromJson(json.loads(record["parts_schema"]))
    except (ValueError, TypeError, KeyError):
        return False
    return io.arrow_safe(schema)


def _returned(spec: JobSpec, result: DataFrame, ctx: TaskContext) -> Any:
    """The chunk's result as an Arrow table, or None when it cannot come back that way
    (spark.NotArrow: more than the server's spark.driver.maxResultSize, or what Arrow cannot
    carry). A result over RETURNED_ROWS or RETURNED_BYTES, or none, marks the job so that its
    later chunks let Spark write their parts."""
    try:
        table, _ = spark.fetch_arrow(result)
    except spark.NotArrow:
        table = None
    if table is None or table.num_rows > RETURNED_ROWS or table.nbytes > RETURNED_BYTES:
        jobs.records(ctx.queue).put(spec.job_id, {"parts_big": "1"})
        log.info("chunk results of job=%s are big: its later chunks are written by Spark",
                 spec.job_id)
    return table


def _paths_of(read: Any, record: dict[str, Any]) -> list[str]:
    """Every path a chunk's read (and the job record's probe) names."""
    if not isinstance(read, dict):
        raise DataJobError("a chunk task whose read is not one", permanent=True)
    paths = [str(p) for p in read.get("files", [])]
    paths += [str(item[0]) for key in ("groups", "rows", "ranges")
              for item in read.get(key, []) if isinstance(item, list | tuple) and item]
    paths += [str(p) for p in (read.get("base"), record.get("probe")) if p]
    return paths


def _partitions_of(record: dict[str, Any]) -> int | None:
    """The Spark partitions the split chose for each chunk (None: Spark's own partitioning,
    and for anything that is not a small number: the record is not trusted)."""
    text = str(record.get("partitions") or "")
    return int(text) if text.isdigit() and 1 <= int(text) <= MAX_PARTITIONS else None


def chunk_frame(session: SparkSession, spec: JobSpec, read: dict[str, Any],
                record: dict[str, Any]) -> DataFrame:
    """The chunk's rows, read by Spark from the input where they are (plan.py)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    schema = StructType.fromJson(json.loads(record["schema"])) if record.get("schema") \
        else None
    partitions = _partitions_of(record)
    spark.file_partitions(session, partitions if read.get("files") else None)
    # With the schema the split found, Spark neither lists nor reads footers to infer it: a
    # small chunk's Spark work went from 0.59 s to 0.39 s (warm, 84,194 rows).
    if read.get("files"):
        return io.read_input(session, spec, read["files"], base=read.get("base"),
                             schema=schema)
    if read.get("groups"):
        return jvm.read_parquet_groups(session, [tuple(g) for g in read["groups"]],
                                       partitions=partitions)
    if read.get("rows"):
        reader = session.read.schema(schema) if schema is not None else session.read
        parts = [reader.parquet(path).where(
            F.col("_metadata.row_index").between(int(a), int(b) - 1))
            for path, a, b in read["rows"]]
        return reduce(lambda x, y: x.unionByName(y), parts)
    if read.get("ranges"):
        assert schema is not None  # the split inferred it
        lines = jvm.read_text_ranges(session, [tuple(r) for r in read["ranges"]],
                                     skip_header=spec.format == "csv", partitions=partitions)
        return io.parse_lines(lines, spec.format, schema)
    # An empty slice (more chunks than rows): no rows, with the input's columns.
    if spec.format == "parquet" and record.get("probe"):
        return session.read.parquet(str(record["probe"])).limit(0)
    return session.createDataFrame([], schema or StructType([]))


# -- combine -----------------------------------------------------------------------------


def combine(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext,
            statements: check.Statements) -> dict[str, Any]:
    """Once every chunk is done: the combine SQL over the view `parts` (or the parts as they
    are, moved into place), the manifest, `_SUCCESS`, then the staging data removed. A retry
    after the output was moved into place only finishes the clean-up."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    q = ctx.queue
    out = Path(spec.output)
    done = written_by(out)
    if done is not None and done.get("job") == spec.job_id:
        _finish(spec, q, done)
        return {"rows_out": done["rows_out"]}
    started = time.monotonic()
    rec = jobs.records(q).all(spec.job_id)
    n = int(rec["chunks"])
    reports = {int(f.split(":", 1)[1]): json.loads(v) for f, v in rec.items()
               if f.startswith("chunk:")}
    missing = [k for k in range(n) if not spec.part_dir(k).is_dir()]
    if missing:
        raise DataJobError(f"the combine step of job {spec.job_id} found no part for chunks "
                           f"{missing[:10]}: the staging directory {spec.staging} was changed")
    staged_out = spec.staging / "out"
    shutil.rmtree(staged_out, ignore_errors=True)
    output_by = "spark"  # or "worker": _combined_here
    with sparking(spec, payload, ctx) as session:
        spark.file_partitions(session, None)  # big parts: read by all cores
        if statements.combine_sql is not None:
            schema = StructType.fromJson(json.loads(rec["parts_schema"])) \
                if rec.get("parts_schema") else None  # as the split's analysis found it
            dirs = [spec.part_dir(k) for k in range(n)]
            parts = io.small_parts_frame(session, dirs, schema) if schema is not None \
                else None
            # Small parts and no other table: one shuffle partition is plenty, and an ORDER BY
            # needs no sampling job for its ranges (the README job's combine: 0.39 -> 0.26 s).
            tiny = parts is not None and not spec.views
            if parts is None:
                reader = session.read if schema is None else session.read.schema(schema)
                parts = reader.parquet(*(str(d) for d in dirs))
            spark.shuffle_into(session, 1 if tiny else None)
            spark.adaptive(session, True)  # a chunk on this slot may have turned it off
            query = spark.sql_over(session, statements.combine_sql.text,
                                   {"parts": parts, **io.view_frames(session, spec)})
            here = _combined_here(session, statements, query, staged_out) \
                if tiny and spec.output_format == "parquet" else None
            if here is not None:
                rows_out, output_by = here, "worker"
            elif spec.output_format == "parquet":  # counted from the footers
                io.write(query, staged_out, spec.output_format)
                rows_out = io.parquet_rows(staged_out)
            else:
                seen = Observation("rows_out")
                io.write(query.observe(seen, F.count(F.lit(1)).alias("rows")), staged_out,
                         spec.output_format)
                rows_out = int(seen.get["rows"])
        else:
            staged_out.mkdir(parents=True)
            for k in range(n):
                for i, f in enumerate(io.data_files(spec.part_dir(k))):
                    suffix = "".join(f.suffixes[-2:]) if f.name.endswith(".snappy.parquet") \
                        else f.suffix
                    os.rename(f, staged_out / f"part-{k:05d}-{i}{suffix}")
            rows_out = sum(int(r["rows_out"]) for r in reports.values())
        version, master = session.version, spark.master_of(session)
    manifest = {
        "job": spec.job_id,
        "input": spec.input, "format": spec.format, "views": spec.views,
        "sql": spec.sql, "transform": spec.transform, "combine_sql": spec.combine_sql,
        "output": spec.output, "output_format": spec.output_format,
        "split": rec.get("split", "files"),
        "chunks": [reports.get(k) for k in range(n)],
        "rows_in": None if any(r["rows_in"] is None for r in reports.values())
        else sum(int(r["rows_in"]) for r in reports.values()),
        "rows_out": rows_out, "output_written_by": output_by,
        "chunk_seconds": round(sum(float(r["seconds"]) for r in reports.values()), 3),
        "combine_seconds": round(time.monotonic() - started, 3),
        "spark_version": version, "master": master,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (staged_out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    (staged_out / SUCCESS).write_text("")
    _replace_output(spec, out)
    os.rename(staged_out, out)
    _finish(spec, q, manifest)
    log.info("combine job=%s chunks=%d rows_out=%d in %.2fs", spec.job_id, n, rows_out,
             manifest["combine_seconds"])
    return {"rows_out": rows_out}


def _combined_here(session: SparkSession, statements: check.Statements, query: DataFrame,
                   out: Path) -> int | None:
    """The combine step's result fetched over Arrow and written here, as the Parquet output's
    one file, when its SQL aggregates small parts on Spark Connect: its rows. None when it is
    left to Spark's write (nothing written): another session, a query that does not
    aggregate, a result that cannot come back over Arrow (spark.NotArrow), or one whose
    columns Spark would not read back as it writes them (io.arrow_safe) or would refuse to
    write (a name twice). Spark's write of 185 rows costs a job of its own with its commit:
    the combine of eight such parts, from a script on the stack's server, took 0.13 s fetched
    this way against 0.19 s written by Spark (medians of 10 rounds)."""
    assert statements.combine_sql is not None
    if not (spark.is_connect(session) and statements.combine_sql.aggregates):
        return None
    try:
        table, schema = spark.fetch_arrow(query)
    except spark.NotArrow:
        return None
    names = [f.name.lower() for f in schema.fields]
    if not io.arrow_safe(schema) or len(set(names)) < len(names) or "" in names:
        return None
    io.write_arrow(table, out)
    return int(table.num_rows)


def _replace_output(spec: JobSpec, out: Path) -> None:
    """Make room for the output: nothing there, an empty folder, or (with --overwrite) a
    data job's complete output. Anything else stays, and the job fails saying why."""
    if not out.exists() and not out.is_symlink():
        return
    if out.is_dir() and not out.is_symlink() and not any(out.iterdir()):
        out.rmdir()
        return
    if spec.overwrite and not out.is_symlink() and written_by(out) is not None:
        shutil.rmtree(out)
        return
    raise DataJobError(f"the combine step of job {spec.job_id}: {out} exists and is not a "
                       "data job's output that --overwrite may replace; nothing was changed "
                       "there (remove it, or submit with another --output)", permanent=True)


def _finish(spec: JobSpec, q: Any, manifest: dict[str, Any]) -> None:
    rec = jobs.records(q)
    rec.put(spec.job_id, {"manifest": json.dumps(manifest)})
    rec.keep_for(spec.job_id, jobs.RECORD_TTL_S)
    shutil.rmtree(spec.staging, ignore_errors=True)

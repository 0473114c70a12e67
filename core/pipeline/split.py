"""The split of a data job: plan the chunks from the input's metadata (plan.py), add one chunk
task per chunk to the job's request, then seal it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from core.queue import RequestSealed, read
from core.queue.records import Records
from core.worker.context import TaskContext

from . import (
    check,
    chunk,
    combine,
    incremental,
    io,
    jobs,
    jvm,
    onestep,
    plan,
    spark_query,
    spark_sessions,
    spark_target,
    step,
)
from .errors import DataJobError
from .spec import JobSpec, SpecError, is_local

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("queueadmin.pipeline")
ADD_BATCH = 500  # chunk tasks added to the request per call
INLINE_READ_BYTES = 8 * 1024  # a bigger chunk read (many files) lives in the job's record
MAX_EXPLAIN_CHARS = 64 * 1024  # of each EXPLAIN kept in the job's record
WORKERS_LIVE_MS = 30_000  # a worker seen this recently counts for the free slots


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
    split of a small job went from 0.3-0.5 s to about 0.1 s).

    Spark's EXPLAIN of the chunk query over the first chunk's read, and of the combine query,
    is recorded with the plan (_explained: planning calls, no Spark job)."""
    started = time.monotonic()
    q, rec = ctx.queue, jobs.records(ctx.queue)
    info = read.request(q, spec.job_id)
    added = max(0, (info.total if info else 1) - 1)  # tasks after the split itself
    listing = plan.list_input(spec)
    if listing is not None and not listing.files:
        raise DataJobError(f"the split of job {spec.job_id}: input {spec.input} holds no data "
                           "file (moved or deleted since the job was submitted?)")
    known = rec.get(spec.job_id, "plan")
    recorded = json.loads(known) if known else None
    if recorded is None:
        slots = min(_free_slots(q), info.concurrency if info else 1)
        if (small := _one_step_plan(spec, statements, listing, slots, rec, ctx, started)):
            recorded = {"rows": small[2], "one_step": True}
    if recorded is not None and recorded.get("one_step") and listing is not None:
        _one_step(spec, payload, ctx, statements, listing, recorded["rows"], started)
        return
    if recorded is not None:
        reads, how, rows = recorded["reads"], recorded["how"], recorded["rows"]
        reused = int(recorded.get("reused", 0))
    else:
        reads, how, rows, listing, reused = _planned(spec, payload, ctx, statements, rec,
                                                     listing, slots, started)
    n = len(reads)
    # An incremental job's reused chunks (its first ones) have their parts already.
    _add_chunks(spec, ctx, rec, reads, added + reused)
    with contextlib.suppress(RequestSealed):
        q.seal(spec.job_id)
    log.info("split job=%s rows=%s chunks=%d by %s of %s file(s) in %.2fs", spec.job_id,
             "?" if rows is None else f"{rows:,}", n, how,
             len(listing.files) if listing else "?",
             time.monotonic() - started)


def _one_step_plan(spec: JobSpec, statements: check.Statements, listing: plan.Listing | None,
                   slots: int, rec: Records, ctx: TaskContext, started: float,
                   ) -> tuple[list[dict[str, Any]], str, int | None] | None:
    """The plan of a job that runs in one step (onestep.py: a local input planned into one
    chunk, with combine SQL, not incremental), recorded as such; None for any other job. From
    the input's metadata alone: such a job needs no Spark analysis at its split (Spark
    analyses its query as it runs it)."""
    if listing is None or spec.combine_sql is None or spec.incremental:
        return None
    footers = _footers(spec, listing, statements) if spec.format == "parquet" else None
    if footers is not None:
        work, known = sum(sum(f.group_bytes) for f in footers), sum(f.rows for f in footers)
    else:
        work, known = sum(f.size for f in plan.sizes(listing.files)), None
    if plan.chunk_count(spec, rows=known, work_bytes=work, slots=slots) != 1:
        return None
    reads, how, rows = _plan(spec, listing, statements, False, slots, footers)
    if not onestep.eligible(spec, reads):
        return None
    rec.put(spec.job_id, {
        "chunks": 1, "rows": -1 if rows is None else rows, "split": how,
        "probe": listing.files[0],
        "plan": json.dumps({"reads": reads, "how": how, "rows": rows, "one_step": True}),
        "split_seconds": round(time.monotonic() - started, 3), **_split_timing(ctx, started)})
    return reads, how, rows


def _split_timing(ctx: TaskContext, started: float) -> dict[str, int]:
    """The split's start (ms; `started`: its time.monotonic()) and queue wait, recorded for
    the job page's bars."""
    at = int(time.time() * 1000 - (time.monotonic() - started) * 1000)
    return {f"split_{k}": v for k, v in step.timing(ctx, at).items() if v is not None}


def _one_step(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext,
              statements: check.Statements, listing: plan.Listing, rows: int | None,
              started: float) -> None:
    """The job run here, in one step (onestep.py), unless an earlier attempt of this split
    put its output in place already: then only its end is done again."""
    if combine.already_done(spec, ctx.queue) is None:
        onestep.run(spec, payload, ctx, statements, listing.files, listing.base, rows)
    with contextlib.suppress(RequestSealed):
        ctx.queue.seal(spec.job_id)
    log.info("split job=%s rows=%s: one step, in %.2fs", spec.job_id,
             "?" if rows is None else f"{rows:,}", time.monotonic() - started)


def _planned(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext,
             statements: check.Statements, rec: Records, listing: plan.Listing | None,
             slots: int, started: float,
             ) -> tuple[list[dict[str, Any]], str, int | None, plan.Listing, int]:
    """The chunks' reads, how the input was cut and its rows (_plan), with Spark's analysis of
    the statements and its EXPLAIN of them, recorded in the job's record; and the input's
    listing (Spark lists a remote input)."""
    spark_at = spark_target.target_from_settings()
    target = spark_at.description
    reader = jvm.known_available(target)
    # A local Parquet input without partition folders: its footers give plan and columns.
    footers = _footers(spec, listing, statements) \
        if listing is not None and listing.base is None and spec.format == "parquet" \
        else None
    planned = None
    if reader and footers is not None and listing is not None and not spec.incremental:
        planned = _plan(spec, listing, statements, reader, slots, footers)
        if planned[1] != "row groups":
            planned = None  # files or rows: the chunks read better with Spark's schema
    fields: dict[str, Any] = {"schema": "", "parts_schema": ""}
    if planned is None:
        with step.sparking(spec, payload, ctx) as session:
            spark_query.file_partitions(session, None)
            cores = spark_sessions.local_cores(session, spark_at)
            frame = io.footer_frame(session, footers) if footers is not None else \
                incremental.known_frame(session, spec, listing) \
                if spec.incremental and listing is not None else None
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
            version = session.version if spec.incremental else ""
        assert listing is not None
        planned = _plan(spec, listing, statements, reader, slots, footers) \
            if not spec.incremental else \
            _incremental(spec, listing, footers, slots, statements, fields, version)
    else:
        assert listing is not None and footers is not None  # a local input: listed above
        cores = _analysed_groups(spec, payload, ctx, statements, listing, footers, fields)
    reads, how, rows = planned
    if not spec.combine_sql:  # the parts are the output
        _partitions_in(spec, json.loads(fields["parts_schema"]).get("fields", []))
    # The chunks that run at once share Spark's cores (when it runs here): each is read in
    # its share of them (an incremental job's reused chunks do not run).
    running = len(reads) - int(fields.get("reused", 0))
    partitions = spark_query.chunk_partitions(cores, min(slots, max(1, running)))
    fields |= {"probe": listing.files[0], "partitions": partitions or ""}
    fields |= _explained(spec, payload, ctx, statements, reads[0], fields)
    rec.put(spec.job_id, {
        "chunks": len(reads), "rows": -1 if rows is None else rows, "split": how, **fields,
        "plan": json.dumps({"reads": reads, "how": how, "rows": rows,
                            "reused": int(fields.get("reused", 0))}),
        "split_seconds": round(time.monotonic() - started, 3), **_split_timing(ctx, started)})
    return reads, how, rows, listing, int(fields.get("reused", 0))


def _analysed_groups(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext,
                     statements: check.Statements, listing: plan.Listing,
                     footers: list[plan.InputFile], fields: dict[str, Any]) -> int | None:
    """Spark's analysis of a job planned from its Parquet footers alone (row groups): the
    parts' schema into `fields`; returns Spark's local cores (None: not local)."""
    with step.sparking(spec, payload, ctx) as session:
        spark_query.file_partitions(session, None)
        cores = spark_sessions.local_cores(session, spark_target.target_from_settings())
        frame = io.footer_frame(session, footers)
        if frame is None:
            frame = io.read_input(session, spec, listing.files)
        fields["parts_schema"] = _analyse(session, spec, frame, statements)
    return cores


def _incremental(spec: JobSpec, listing: plan.Listing, footers: list[plan.InputFile] | None,
                 slots: int, statements: check.Statements, fields: dict[str, Any],
                 version: str) -> tuple[list[dict[str, Any]], str, int | None]:
    """An incremental job's plan (incremental.replan): the last run's chunks whose files are
    unchanged come first, their parts linked into the staging and their reports recorded
    (no task runs for them), then new chunks of whole files for the rest. `fields` (the
    record's) gain each chunk's file identities, the fingerprint and how many were reused."""
    sql = statements.sql.text if statements.sql is not None else None
    fp = incremental.fingerprint(spec, sql, fields["schema"], version)
    reads, reused, inputs = incremental.replan(spec, listing, footers, slots, fp)
    fields |= {"fingerprint": fp, "inputs": json.dumps(inputs), "reused": len(reused),
               **{f"chunk:{r['chunk']}": json.dumps(r) for r in reused}}
    rows = sum(f.rows for f in footers) if footers is not None else None
    return reads, "files", rows


def _explained(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext,
               statements: check.Statements, first: dict[str, Any],
               record: dict[str, Any]) -> dict[str, str]:
    """Spark's EXPLAIN of the chunk query over the first chunk's read (as chunk.chunk_frame
    reads it, with the record's fields), and of the combine query over the parts' folder, as
    yet empty, read with the parts' schema (an empty frame would be planned away). Planning
    calls, no Spark job, but 0.1-0.2 s each for the 40.4M-row benchmark job on a warm stack,
    before which no chunk is added. One after the other: asked at once from two threads, a
    job with a --view failed its split now and then (the view not found: one run in four of
    tests/pipeline/test_pipeline_incremental.py's join). A combine statement Spark refuses
    fails here."""
    with step.sparking(spec, payload, ctx) as session:
        views = io.view_frames(session, spec)
        frame = chunk.chunk_frame(session, spec, first, record)
        query = step.transform(session, spec, frame, statements, views)
        out = {"explain_sql": spark_query.explain(query)[:MAX_EXPLAIN_CHARS]}
        if statements.combine_sql is not None:
            out["explain_combine"] = _explain_combine(session, spec, statements, views,
                                                      record["parts_schema"])
    return out


def _explain_combine(session: SparkSession, spec: JobSpec, statements: check.Statements,
                     views: dict[str, DataFrame], parts_schema: str) -> str:
    from pyspark.sql.types import StructType

    assert statements.combine_sql is not None
    folder = spec.part_dir(0).parent
    made = [p for p in (spec.staging, folder) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    try:
        parts = session.read.schema(StructType.fromJson(json.loads(parts_schema))) \
            .parquet(str(folder))
        combined = spark_query.sql_over(session, statements.combine_sql.text,
                                        {"parts": parts, **views})
        if spec.partition_by:
            _partitions_in(spec, [{"name": c} for c in combined.columns])
        return spark_query.explain(combined)[:MAX_EXPLAIN_CHARS]
    finally:
        for p in reversed(made):  # what it made, if still empty
            with contextlib.suppress(OSError):
                p.rmdir()


def _partitions_in(spec: JobSpec, fields: list[dict[str, Any]]) -> None:
    """Refuse, for good, a --partition-by column that the output (as Spark analysed the
    job's SQL or transform) does not have: before any chunk runs."""
    try:
        check.partition_columns(spec, [str(f.get("name")) for f in fields])
    except SpecError as exc:
        raise DataJobError(f"the split of job {spec.job_id}: {exc}", permanent=True) from exc


def _add_chunks(spec: JobSpec, ctx: TaskContext, rec: Records, reads: list[dict[str, Any]],
                added: int) -> None:
    """One chunk task per read, after the `added` ones an earlier run of the split added,
    ADD_BATCH per call; a read over INLINE_READ_BYTES waits in the job's record."""
    q, n = ctx.queue, len(reads)
    for first in range(added, n, ADD_BATCH):
        ctx.check()
        batch = range(first, min(n, first + ADD_BATCH))
        big = {k: reads[k] for k in batch if len(json.dumps(reads[k])) > INLINE_READ_BYTES}
        if big:
            rec.put(spec.job_id, {f"read:{k}": json.dumps(r) for k, r in big.items()})
        q.add(spec.job_id, [
            {"op": "chunk", "job": spec.job_id, "chunk": k,
             **({} if k in big else {"read": reads[k]})} for k in batch])


def _analyse(session: SparkSession, spec: JobSpec, frame: DataFrame,
             statements: check.Statements) -> str:
    """Spark's analysis of the job's chunk statement over `frame` (no data read): a statement
    Spark refuses raises here (the combine's, at its EXPLAIN: _explained). Returns the parts'
    schema (JSON), which the combine reads them with."""
    views = io.view_frames(session, spec)
    result_schema = step.transform(session, spec, frame.limit(0), statements, views).schema
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
        page = read.workers(q, limit=200)
    except Exception:
        return 1
    live = [w for w in page.items if now - w.last_beat_ms < WORKERS_LIVE_MS]
    return max(1, sum(_slots(w.info) for w in live))


def _slots(info: Any) -> int:
    """A heartbeat's announced slots; 1 for anything odd (a heartbeat is not trusted)."""
    slots = info.get("slots") if isinstance(info, dict) else None
    return slots if isinstance(slots, int) and 1 <= slots <= 1024 else 1

"""The three tasks of a data job, run by workers under the handler `datajob` (see jobs.py):
split (input -> N staged Parquet chunks, streamed into the request), chunk (one chunk ->
its part, idempotently) and combine (parts -> output, manifest, `_SUCCESS`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.queue import RequestSealed, introspect
from core.worker.context import Cancelled, TaskContext
from core.worker.registry import handler

from . import io, jobs, plan, spark, transforms
from .errors import DataJobError, JvmDied, explain, is_permanent, jvm_died
from .spec import MANIFEST, SUCCESS, JobSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("queueadmin.pipeline")
ID_BITS = 33  # monotonically_increasing_id(): partition index << 33 | row within partition
ADD_BATCH = 500  # chunk tasks added to the request per call


@handler(jobs.HANDLER)
def datajob(payload: dict[str, Any], ctx: TaskContext) -> dict[str, Any] | None:
    """Run one task of a data job: payload {"op": split|chunk|combine, "job", "spec", ...}."""
    op = payload.get("op")
    run: Callable[[JobSpec, dict[str, Any], TaskContext], dict[str, Any] | None] | None = {
        "split": split, "chunk": chunk, "combine": combine}.get(str(op))
    if run is None:
        raise DataJobError(f"unknown data job task {op!r}: expected split, chunk or combine",
                           permanent=True)
    spec = JobSpec.from_dict(payload["spec"])
    try:
        return run(spec, payload, ctx)
    except Cancelled:
        if ctx.cancelled:  # the job was cancelled: its staging goes once its tasks stop
            jobs.clean_when_stopped(ctx.queue, spec.job_id)
        raise


def _where(spec: JobSpec, payload: dict[str, Any]) -> str:
    op = payload.get("op")
    what = f"chunk {payload['chunk']}" if op == "chunk" else f"the {op}"
    return f"{what} of job {spec.job_id}"


@contextlib.contextmanager
def sparking(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext) -> Iterator[SparkSession]:
    """A task session whose Spark jobs a cancel or a lost lease interrupts; Spark's errors
    become messages that say what to change. A dead JVM makes the worker exit (SIGTERM to
    itself: it finishes or releases its other tasks) so that its supervisor starts a fresh one;
    this task fails and runs again elsewhere."""
    where = _where(spec, payload)
    try:
        base = spark.get_session()
    except Exception as exc:
        raise DataJobError(f"{where}: Spark did not start: {exc}") from exc
    session = spark.task_session(base)
    tag = f"qa-{ctx.request_id}-{ctx.task_id}".replace(".", "-")
    try:
        with spark.cancellable(session, tag, lambda: ctx.cancelled or ctx.lost):
            yield session
    except (Cancelled, DataJobError):
        raise
    except Exception as exc:
        if ctx.cancelled or ctx.lost:
            ctx.check()  # raises Cancelled or LeaseGone: the worker releases or drops the task
        if jvm_died(exc):
            spark.forget_dead_session()
            log.error("spark JVM died in %s: stopping this worker for a restart", where)
            os.kill(os.getpid(), signal.SIGTERM)
            raise JvmDied(explain(exc, where=where)) from exc
        raise DataJobError(explain(exc, where=where), permanent=is_permanent(exc)) from exc


def _transform(session: SparkSession, spec: JobSpec, df: DataFrame) -> DataFrame:
    df.createOrReplaceTempView("chunk")
    io.register_views(session, spec)
    if spec.sql is not None:
        return session.sql(spec.sql)
    fn = transforms.get(spec.transform or "")
    if fn is None:
        raise DataJobError(f"transform {spec.transform!r} is not registered in this worker: "
                           "add its module to QA_HANDLER_MODULES and restart the workers")
    return fn(df)


# -- split -------------------------------------------------------------------------------


def chunk_count(spec: JobSpec, rows: int) -> int:
    if spec.chunks is not None:
        return spec.chunks
    per = spec.rows_per_chunk or 1_000_000
    return max(1, -(-rows // per))


def split(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext) -> None:
    """Cut the input into N chunks and add one chunk task per chunk to the request, then seal
    it. A Parquet input on a filesystem the workers share is cut from its files' footers
    alone (plan.py: nothing is read or copied, each chunk reads its own slice); any other input
    is read once by Spark and staged as N Parquet chunks (split_with_spark). A retry skips the
    chunks already added (the cut is the same on the same input) and keeps the count of
    chunks the first run recorded."""
    started = time.monotonic()
    q, key = ctx.queue, jobs.record_key(ctx.queue, spec.job_id)
    info = introspect.request(q, spec.job_id)
    added = max(0, (info.total if info else 1) - 1)  # tasks after the split itself
    files = plan.input_files(spec) if spec.format == "parquet" else None
    if not files:
        split_with_spark(spec, payload, ctx, added)
        return
    with reading_input(spec, payload):
        footers = plan.read_footers(files)
    rows = sum(f.rows for f in footers)
    known = q.redis.hget(key, "chunks")
    n = int(known) if known else chunk_count(spec, rows)
    cut = plan.slices(footers, n)
    how = ("files" if all(p.whole for s in cut for p in s)
           else "row groups" if sum(len(f.group_rows) for f in footers) >= n else "rows")
    probe = footers[0].path
    if spec.sql is not None and not payload.get("checked"):
        # Not analysed at submit (the console's form starts no Spark): a statement Spark
        # refuses fails here, once, rather than in every chunk.
        with sparking(spec, payload, ctx) as session:
            _transform(session, spec, session.read.parquet(probe)).schema  # noqa: B018
    q.redis.hset(key, mapping={"chunks": n, "rows": rows, "split": how})
    for first in range(added, n, ADD_BATCH):
        ctx.check()
        q.add(spec.job_id, [
            jobs.payload("chunk", spec, chunk=k, pieces=[p.to_list() for p in cut[k]],
                         probe=probe)
            for k in range(first, min(n, first + ADD_BATCH))])
    with contextlib.suppress(RequestSealed):
        q.seal(spec.job_id)
    log.info("split job=%s rows=%d chunks=%d by %s of %d file(s) in %.2fs", spec.job_id, rows,
             n, how, len(files), time.monotonic() - started)


# What the first chunk of a job in this worker learnt, for the job's later chunks here:
# (job, its spec, what) -> the columns its SQL reads, or the schema of its chunks' frames.
_MEMO: dict[tuple[str, str, str], Any] = {}


def _memo(spec: JobSpec, what: str, make: Callable[[], Any]) -> Any:
    key = (spec.job_id, spec.to_json(), what)
    if key not in _MEMO:
        value = make()
        if len(_MEMO) >= 128:
            _MEMO.clear()
        _MEMO[key] = value
    return _MEMO[key]


def _read_parquet(session: SparkSession, spec: JobSpec, what: str, *paths: str) -> DataFrame:
    """The Parquet files `paths` as a DataFrame, with the schema the job's first such read in
    this worker inferred: Spark's inference reads a footer and costs ~80 ms a time (measured
    on a one-row file), a tenth of a small chunk's Spark work."""
    schema = _MEMO.get((spec.job_id, spec.to_json(), what))
    if schema is not None:
        return session.read.schema(schema).parquet(*paths)
    df = session.read.parquet(*paths)
    _memo(spec, what, lambda: df.schema)
    return df


def _columns_read(session: SparkSession, spec: JobSpec, probe: str) -> list[str] | None:
    """The input's columns the job's SQL reads, in the input's order (Spark's column pruning),
    so that a chunk stages only those; None for every column (a Python transform may look at
    any; Spark Connect does not say). Asked once per job in a worker process, by its first
    chunk there (asking in the split would make every chunk wait for the split's worker to
    start Spark)."""
    if spec.sql is None:
        return None

    def ask() -> list[str] | None:
        frame = session.read.parquet(probe)  # the footer only: a schema
        needed = spark.scan_columns(_transform(session, spec, frame), probe)
        if needed is None:
            return None
        return [c for c in frame.columns if c in needed] or frame.columns[:1]

    result: list[str] | None = _memo(spec, "columns", ask)
    return result


@contextlib.contextmanager
def reading_input(spec: JobSpec, payload: dict[str, Any]) -> Iterator[None]:
    """pyarrow's failures on the input files as messages: a file missing, files of different
    schemas, a file that is not Parquet. Other OS errors (a full disk) pass as they are."""
    where = _where(spec, payload)
    try:
        yield
    except plan.InputError as exc:  # files of different schemas: no retry changes them
        raise DataJobError(f"{where}: {exc}", permanent=True) from exc
    except FileNotFoundError as exc:
        raise DataJobError(f"{where}: a file is missing (moved or deleted since the job was "
                           f"submitted?): {exc}") from exc
    except OSError:
        raise
    except Exception as exc:
        raise DataJobError(f"{where}: an input file is corrupt or not in the format given "
                           f"(--format): {type(exc).__name__}: {exc}") from exc


def split_with_spark(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext,
                     added: int) -> None:
    """Read the input once (persisted; only the columns the job's SQL reads, as Spark's plan
    says), number its rows in input order, write N contiguous ranges as staged Parquet chunks
    and add each chunk's task to the request as soon as it is written: for inputs that
    plan.py does not cut (CSV, JSON lines, remote, partitioned)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.monotonic()
    q, key = ctx.queue, jobs.record_key(ctx.queue, spec.job_id)
    with sparking(spec, payload, ctx) as session:
        data = io.read_input(session, spec)
        if spec.sql is not None:  # a Python transform may look at any column: all of them
            needed = spark.scan_columns(_transform(session, spec, data), spec.input)
            if needed is not None:
                keep = [c for c in data.columns if c in needed] or data.columns[:1]
                data = data.select(*(F.col("`" + c.replace("`", "``") + "`") for c in keep))
        df = data.withColumn(
            "__qa_id", F.monotonically_increasing_id()).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            by_partition = df.groupBy(F.shiftright("__qa_id", ID_BITS).alias("p")).count()
            counts: dict[int, int] = dict(by_partition.collect())
            rows = sum(counts.values())
            known = q.redis.hget(key, "chunks")
            n = int(known) if known else chunk_count(spec, rows)
            q.redis.hset(key, mapping={"chunks": n, "rows": rows, "split": "spark"})
            offsets, total = [], 0
            for p in sorted(counts):
                offsets += [F.lit(p), F.lit(total)]
                total += counts[p]
            index = (F.create_map(*offsets)[F.shiftright("__qa_id", ID_BITS)]
                     + F.col("__qa_id").bitwiseAND((1 << ID_BITS) - 1)) if offsets else F.lit(0)
            staged = df.withColumn(
                "__qa_chunk", F.floor(index * F.lit(n) / F.lit(max(rows, 1))).cast("int"))
            for k in range(added, n):
                ctx.check()
                target = spec.chunk_dir(k)
                tmp = io.temp_beside(target)
                target.parent.mkdir(parents=True, exist_ok=True)
                io.write(staged.filter(F.col("__qa_chunk") == k).drop("__qa_id", "__qa_chunk"),
                         tmp, "parquet", shuffle=True)
                io.replace_dir(tmp, target)
                q.add(spec.job_id, [jobs.payload("chunk", spec, chunk=k)])
        finally:
            with contextlib.suppress(Exception):
                df.unpersist()
    with contextlib.suppress(RequestSealed):
        q.seal(spec.job_id)
    log.info("split job=%s rows=%d chunks=%d staged=%d in %.2fs", spec.job_id, rows, n,
             n - added, time.monotonic() - started)


# -- chunk -------------------------------------------------------------------------------


def chunk(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    """Transform one staged chunk into its part: written to a temporary directory and renamed
    over the part, so a retry replaces its own part and never adds rows twice. Reports rows
    in and out, seconds, attempt and worker in the job's record (and as its result)."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    k = int(payload["chunk"])
    started = time.monotonic()
    with sparking(spec, payload, ctx) as session:
        df, rows_in = _chunk_input(session, spec, payload)
        result = _transform(session, spec, df)
        seen = Observation(f"rows_{k}")
        target = spec.part_dir(k)
        tmp = io.temp_beside(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        io.write(result.observe(seen, F.count(F.lit(1)).alias("rows")), tmp, spec.parts_format)
        rows_out = int(seen.get["rows"])
        ctx.check()  # not cancelled, still ours: only then does the part replace the old one
        io.replace_dir(tmp, target)
    if "pieces" in payload:  # staged from the input by this task: a retry stages it again
        shutil.rmtree(spec.chunk_dir(k), ignore_errors=True)
    report = {"chunk": k, "rows_in": rows_in, "rows_out": rows_out,
              "seconds": round(time.monotonic() - started, 3), "attempt": ctx.attempt,
              "worker": ctx.worker}
    ctx.queue.redis.hset(jobs.record_key(ctx.queue, spec.job_id), f"chunk:{k}",
                         json.dumps(report))
    log.info("chunk job=%s chunk=%d rows_in=%d rows_out=%d attempt=%d in %.2fs", spec.job_id,
             k, rows_in, rows_out, ctx.attempt, report["seconds"])
    return report


def _chunk_input(session: SparkSession, spec: JobSpec,
                 payload: dict[str, Any]) -> tuple[DataFrame, int]:
    """The chunk's rows as a DataFrame, and how many there are. Whole input files are read
    by Spark where they are; a slice inside a file is staged first (plan.stage), with only
    the columns the job's SQL reads; a chunk that split_with_spark staged is read as it is."""
    k = int(payload["chunk"])
    if "pieces" not in payload:
        df = session.read.parquet(str(spec.chunk_dir(k)))
        return df, df.count()
    pieces = [plan.Piece.from_list(v) for v in payload["pieces"]]
    rows = sum(p.stop - p.start for p in pieces)
    if pieces and all(p.whole for p in pieces):
        return _read_parquet(session, spec, "input", *(p.path for p in pieces)), rows
    columns = _columns_read(session, spec, str(payload["probe"]))
    target = spec.chunk_dir(k)
    tmp = io.temp_beside(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with reading_input(spec, payload):
        try:
            plan.stage(pieces, columns, tmp, probe=str(payload["probe"]))
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # a half-written staged slice
            raise
    io.replace_dir(tmp, target)
    return _read_parquet(session, spec, "staged", str(target)), rows


# -- combine -----------------------------------------------------------------------------


def combine(spec: JobSpec, payload: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    """Once every chunk is done: the combine SQL over the view `parts` (or the parts as they
    are, moved into place), the manifest, `_SUCCESS`, then the staging data removed. A retry
    after the output was moved into place only finishes the clean-up."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    q, key = ctx.queue, jobs.record_key(ctx.queue, spec.job_id)
    out = Path(spec.output)
    done = _manifest_of(out)
    if done is not None and done.get("job") == spec.job_id and (out / SUCCESS).exists():
        _finish(spec, q, key, done)
        return {"rows_out": done["rows_out"]}
    started = time.monotonic()
    rec = q.redis.hgetall(key)
    rec = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes)
           else v) for k, v in rec.items()}
    n = int(rec["chunks"])
    reports = {int(f.split(":", 1)[1]): json.loads(v) for f, v in rec.items()
               if f.startswith("chunk:")}
    missing = [k for k in range(n) if not spec.part_dir(k).is_dir()]
    if missing:
        raise DataJobError(f"the combine step of job {spec.job_id} found no part for chunks "
                           f"{missing[:10]}: the staging directory {spec.staging} was changed")
    staged_out = spec.staging / "out"
    shutil.rmtree(staged_out, ignore_errors=True)
    with sparking(spec, payload, ctx) as session:
        if spec.combine_sql:
            parts = session.read.parquet(*(str(spec.part_dir(k)) for k in range(n)))
            parts.createOrReplaceTempView("parts")
            io.register_views(session, spec)
            seen = Observation("rows_out")
            io.write(session.sql(spec.combine_sql).observe(seen, F.count(F.lit(1)).alias("rows")),
                     staged_out, spec.output_format)
            rows_out = int(seen.get["rows"])
            version, master = session.version, spark.master_of(session)
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
        "split": rec.get("split", "spark"),
        "chunks": [reports.get(k) for k in range(n)],
        "rows_in": sum(int(r["rows_in"]) for r in reports.values()),
        "rows_out": rows_out,
        "chunk_seconds": round(sum(float(r["seconds"]) for r in reports.values()), 3),
        "combine_seconds": round(time.monotonic() - started, 3),
        "spark_version": version, "master": master,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    (staged_out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    (staged_out / SUCCESS).write_text("")
    if out.exists():
        # Checked at submit: absent, or --overwrite. Gone first so the rename can land.
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    os.rename(staged_out, out)
    _finish(spec, q, key, manifest)
    log.info("combine job=%s chunks=%d rows_out=%d in %.2fs", spec.job_id, n, rows_out,
             manifest["combine_seconds"])
    return {"rows_out": rows_out}


def _manifest_of(out: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _finish(spec: JobSpec, q: Any, key: str, manifest: dict[str, Any]) -> None:
    q.redis.hset(key, "manifest", json.dumps(manifest))
    q.redis.expire(key, jobs.RECORD_TTL_S)
    shutil.rmtree(spec.staging, ignore_errors=True)

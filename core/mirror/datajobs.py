"""Data jobs into the database (issue 35): each data job's Redis record and requests copied into
DataJob and DataJobChunk rows (core.models.datajobs), idempotently, as the job runs and when it
finishes, so that its page outlives its record (7 days) and its requests.

When: the mirror calls follow() with each batch of a queue's events, once it has applied them.
The "submitted" event of a job's combine step (a follow-up named `<job>.combine` of `<job>`)
makes the job's row; an event that moves a job on (its split sealed, a chunk dead, either
request completed, cancelled, started, reopened or requeued) copies it again; and every
REFRESH_S the jobs still running are copied again (their chunks report as they finish), the
oldest copied first, REFRESH_JOBS per pass, with the jobs created since the last pass that no
event showed this process (another mirror read them, or they were trimmed before any did),
found through the queue's index of job records. A copy is one Redis read of the record, the
job's requests and its dead letters (core.pipeline.jobs.status), and a few upserts.

The rows: the job's state, spec, split (how, chunks, rows, plan, seconds), EXPLAIN texts,
manifest, timings, failures and its latest dead letters (their errors cut); one DataJobChunk
per reported chunk (done) or dead chunk task (failed). status_of() reads them back as the
pipeline's JobStatus, so that the job's page shows the same either way.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, transaction

from core.models.datajobs import DataJob, DataJobChunk
from core.pipeline import jobs
from core.pipeline.spec import JobSpec
from core.queue.client import Queue
from core.queue.follow import Entry
from core.queue.models import DeadLetter as Letter

from .fingerprint import fingerprint

log = logging.getLogger("queueadmin.mirror")

REFRESH_S = 2.0  # how often the jobs still running are copied again
REFRESH_JOBS = 100  # of them per pass, the least recently copied first
FIND_BATCH = 500  # index entries read per pass to find jobs no event showed
FIND_COPIES = 50  # of them copied per pass (a first pass over a week of jobs: in steps)
FIND_SKEW_MS = 300_000  # a job's index time is its submitter's clock: look back this far
LETTERS_KEPT = 50  # a job's latest dead letters kept on its row, and failure lines
ERROR_CHARS = 4000  # of each kept letter's error
FINAL = frozenset({"done", "failed", "cancelled", "expired"})
COMBINE = ".combine"
# Events of a job's requests that move it on, once it is known to be running.
MOVES = frozenset({"sealed", "dead", "completed", "cancelled", "unheld", "due", "reaped"})
REOPENS = frozenset({"reopened", "requeued"})  # of a finished job: looked up first


@dataclass
class _Watch:
    """What the mirror process knows of one queue's data jobs between batches."""

    running: set[str] = field(default_factory=set)  # jobs whose rows are not finished
    next_refresh: float = 0.0
    since_ms: int | None = None  # the index time up to which jobs were looked for
    unreadable: set[str] = field(default_factory=set)  # records not a job's: said once


_WATCHES: dict[tuple[str, str], _Watch] = {}


def follow(q: Queue, events: Sequence[Entry], *, force: bool = False) -> int:
    """The mirror's hook, called with each batch of the queue's events once they are applied:
    copy the data jobs they concern, and every REFRESH_S (each call with `force`: a burst)
    the jobs still running and those created since. Returns how many jobs it copied. A job
    whose record cannot be read as one is logged and skipped: it never stops the mirror."""
    w = _WATCHES.setdefault((q.keys.prefix, q.name), _Watch())
    sure, maybe = _touched(events, w.running)
    if maybe:  # a finished job reopened: only a known job is copied
        sure |= set(DataJob.objects.filter(queue=q.name, job_id__in=list(maybe))
                    .values_list("job_id", flat=True))
    copied = _copy(q, sure, w)
    now = time.monotonic()
    if force or now >= w.next_refresh:
        copied += _refresh(q, w)
        w.next_refresh = now + REFRESH_S
    return copied


def _touched(events: Iterable[Entry], running: set[str]) -> tuple[set[str], set[str]]:
    """The jobs these events certainly concern, and those they may (to look up)."""
    sure: set[str] = set()
    maybe: set[str] = set()
    for _, f in events:
        kind, rid = f.get("type"), f.get("request", "")
        if kind == "submitted":
            after = f.get("after")
            if after and rid == after + COMBINE:
                sure.add(after)
            continue
        job = rid.removesuffix(COMBINE)
        if kind in MOVES and (job in running or job != rid):
            sure.add(job)
        elif kind in REOPENS and rid:
            maybe.add(job)
    return sure, maybe


def _copy(q: Queue, job_ids: Iterable[str], w: _Watch) -> int:
    n = 0
    for job_id in sorted(job_ids):
        try:
            row = sync(q, job_id)
        except (ValueError, KeyError, TypeError) as exc:  # a record not written by a job
            w.unreadable.add(job_id)
            log.warning("mirror: data job %s of queue %s not copied: its record does not "
                        "read as a data job's (%s: %s)", job_id, q.name,
                        type(exc).__name__, exc)
            continue
        if row is None:
            w.running.discard(job_id)
            continue
        n += 1
        (w.running.discard if row.finished_at else w.running.add)(job_id)
    return n


def _refresh(q: Queue, w: _Watch) -> int:
    """Copy again the jobs still running (REFRESH_JOBS, least recently copied first), and
    those the queue's index shows created since the last pass that have no row."""
    unfinished = DataJob.objects.filter(queue=q.name, finished_at__isnull=True)
    w.running = set(unfinished.values_list("job_id", flat=True)[:10_000])
    stale = list(unfinished.order_by("updated_at").values_list("job_id", flat=True)
                 [:REFRESH_JOBS])
    return _copy(q, [*stale, *_found(q, w)], w)


def _found(q: Queue, w: _Watch) -> list[str]:
    """The first FIND_COPIES jobs of the queue's index from w.since_ms on (the newest row's
    time at first, less the submitters' clock skew) that have no row yet. Once a page of the
    index has rows for all its jobs, w.since_ms moves past it (keeping the skew's window)."""
    if w.since_ms is None:
        newest = (DataJob.objects.filter(queue=q.name).order_by("-created_at")
                  .values_list("created_at", flat=True).first())
        w.since_ms = 0 if newest is None else int(newest.timestamp() * 1000) - FIND_SKEW_MS
    got = jobs.records(q).indexed_since(w.since_ms, FIND_BATCH)
    if not got:
        return []
    known = set(DataJob.objects.filter(queue=q.name, job_id__in=[rid for rid, _ in got])
                .values_list("job_id", flat=True))
    missing = [rid for rid, _ in got if rid not in known and rid not in w.unreadable]
    if not missing:
        first, last = got[0][1], got[-1][1]
        full = len(got) == FIND_BATCH
        w.since_ms = (last + (first == last) if full
                      else max(w.since_ms, last - FIND_SKEW_MS))
    return missing[:FIND_COPIES]


def ms_dt(ms: int | float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def sync(q: Queue, job_id: str, *, now: datetime | None = None) -> DataJob | None:
    """Copy one job from Redis into its rows; None (nothing written) when it has no record
    (never a data job, or its record expired: its row keeps what it said, and is marked
    expired if it had not finished)."""
    now = now or datetime.now(UTC)
    rec = jobs.records(q).all(job_id)
    existing: DataJob | None = DataJob.objects.filter(queue=q.name, job_id=job_id).first()
    if "spec" not in rec:
        if existing is not None and existing.finished_at is None:
            DataJob.objects.filter(pk=existing.pk).update(state="expired", finished_at=now,
                                                          updated_at=now)
        return None
    st = jobs.status(q, job_id, rec)
    if st.state == "expired" and existing is not None and existing.finished_at is not None:
        return existing  # its requests are gone: the row says how they ended
    fields = job_fields(st, rec, now, existing)
    with transaction.atomic():
        row = _upsert(q.name, job_id, fields, existing)
        _chunks(row, st)
    return row


def _upsert(queue: str, job_id: str, fields: dict[str, Any], existing: DataJob | None,
            ) -> DataJob:
    if existing is None:
        try:
            with transaction.atomic():  # another mirror may make it at the same moment
                made: DataJob = DataJob.objects.create(queue=queue, job_id=job_id, **fields)
                return made
        except IntegrityError:
            existing = DataJob.objects.get(queue=queue, job_id=job_id)
    if existing.chunks is not None:
        fields.pop("plan", None)  # recorded once, with the chunks: never rewritten
    DataJob.objects.filter(pk=existing.pk).update(**fields)
    for name, value in fields.items():
        setattr(existing, name, value)
    return existing


def job_fields(st: jobs.JobStatus, rec: dict[str, str], now: datetime,
               existing: DataJob | None) -> dict[str, Any]:
    """A DataJob row's fields (all but its queue and id) from the job's status and record."""
    assert st.spec is not None
    manifest = st.manifest or {}
    reports = list(st.reports.values())
    rows = int(rec.get("rows", -1))
    return {
        "state": st.state, "cancelled": st.cancelled, "spec": st.spec.to_json(),
        "priority": st.request.priority if st.request else (
            existing.priority if existing else 0),
        "tenant": st.request.tenant if st.request else (existing.tenant if existing else ""),
        "split_how": rec.get("split", ""), "chunks": st.chunks,
        "input_rows": rows if rows >= 0 else None, "plan": rec.get("plan", ""),
        "split_seconds": _float(rec.get("split_seconds")),
        "explain_sql": rec.get("explain_sql", ""),
        "explain_combine": rec.get("explain_combine", ""),
        "chunks_done": len(reports),
        "chunks_failed": len(_dead_chunks(st.letters).keys() - st.reports.keys()),
        "rows_in": manifest.get("rows_in") if manifest else (
            None if not reports or any(r.rows_in is None for r in reports)
            else sum(int(r.rows_in or 0) for r in reports)),
        "rows_out": manifest.get("rows_out"),
        "chunk_seconds": manifest.get("chunk_seconds") if manifest else (
            round(sum(r.seconds for r in reports), 3) if reports else None),
        "combine_seconds": manifest.get("combine_seconds"),
        "manifest": json.dumps(st.manifest) if st.manifest else "",
        "failures": json.dumps(st.failures[:LETTERS_KEPT]) if st.failures else "",
        "letters": json.dumps([_letter(d) for d in st.letters[-LETTERS_KEPT:]])
        if st.letters else "",
        "created_at": ms_dt(int(rec.get("created_ms") or 0)) if rec.get("created_ms")
        else (existing.created_at if existing else now),
        "finished_at": _finished_at(st, now, existing),
        "updated_at": now,
    }


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _finished_at(st: jobs.JobStatus, now: datetime, existing: DataJob | None,
                 ) -> datetime | None:
    """When the job finished, as Redis says (its requests' end, its last dead letter);
    else as the row said, else now. None while it runs."""
    if st.state not in FINAL:
        return None
    ends = [r.finished_ms for r in (st.request, st.combine) if r is not None and r.finished_ms]
    ends += [d.ts_ms for d in st.letters if d.ts_ms]
    if ends:
        return ms_dt(max(ends))
    return existing.finished_at if existing and existing.finished_at else now


@dataclass(frozen=True, slots=True)
class KeptLetter(Letter):
    """A dead letter as a job's row keeps it: its error may be cut, so its group is kept."""

    fingerprint: str = ""


def group_of(d: Letter) -> str:
    """The dead letter's group on the Dead letters page (core.mirror.fingerprint)."""
    if isinstance(d, KeptLetter) and d.fingerprint:
        return d.fingerprint
    return fingerprint(d.handler, d.error).fingerprint


def _letter(d: Letter) -> dict[str, Any]:
    """A dead letter as the job's row keeps it: what its page needs (which task, why, where;
    its group on the Dead letters page), its error cut."""
    try:
        p = json.loads(d.payload)
    except ValueError:
        p = {}
    task = {k: p[k] for k in ("op", "chunk") if isinstance(p, dict) and k in p}
    return {"id": d.id, "request": d.request_id, "task": d.task_id,
            "payload": json.dumps(task), "error": d.error[:ERROR_CHARS],
            "fingerprint": group_of(d), "attempts": d.attempts, "worker": d.worker,
            "ts_ms": d.ts_ms, "handler": d.handler, "tenant": d.tenant}


def _dead_chunks(letters: list[Letter]) -> dict[int, Letter]:
    """Chunk number -> its task's latest dead letter."""
    out: dict[int, Letter] = {}
    for d in letters:
        try:
            p = json.loads(d.payload)
        except ValueError:
            continue
        if isinstance(p, dict) and p.get("op") == "chunk" and isinstance(p.get("chunk"), int):
            k = int(p["chunk"])
            if k not in out or d.id > out[k].id:
                out[k] = d
    return out


CHUNK_FIELDS = ["state", "rows_in", "rows_out", "seconds", "attempt", "worker",
                "part_written_by", "input_bytes", "shuffle_read_bytes", "shuffle_write_bytes",
                "error", "letter", "fingerprint"]


def _chunks(job: DataJob, st: jobs.JobStatus) -> None:
    """One row per reported chunk (done) and per chunk whose task is a dead letter (failed):
    only those that differ from their row are written (a job's refresh while it runs
    writes its new reports)."""
    want: dict[int, dict[str, Any]] = {}
    for k, d in _dead_chunks(st.letters).items():
        want[k] = {"state": "failed", "rows_in": None, "rows_out": None, "seconds": None,
                   "attempt": d.attempts, "worker": d.worker[:200], "part_written_by": "",
                   "input_bytes": None, "shuffle_read_bytes": None,
                   "shuffle_write_bytes": None, "error": d.error[:ERROR_CHARS],
                   "letter": d.id, "fingerprint": group_of(d)}
    for k, r in st.reports.items():  # a report wins: a requeued chunk that then ran
        want[k] = {"state": "done", "rows_in": r.rows_in, "rows_out": r.rows_out,
                   "seconds": r.seconds, "attempt": r.attempt, "worker": r.worker[:200],
                   "part_written_by": r.part_written_by[:10], "input_bytes": r.input_bytes,
                   "shuffle_read_bytes": r.shuffle_read_bytes,
                   "shuffle_write_bytes": r.shuffle_write_bytes, "error": "", "letter": "",
                   "fingerprint": ""}
    have = {row["chunk"]: row for row in DataJobChunk.objects.filter(job=job).values(
        "chunk", *CHUNK_FIELDS)}
    changed = [DataJobChunk(job=job, chunk=k, **v) for k, v in sorted(want.items())
               if have.get(k) != {"chunk": k, **v}]
    if changed:
        DataJobChunk.objects.bulk_create(changed, batch_size=500, update_conflicts=True,
                                         unique_fields=["job", "chunk"],
                                         update_fields=CHUNK_FIELDS)


def status_of(row: DataJob, chunk_rows: Iterable[DataJobChunk]) -> jobs.JobStatus:
    """The job as its rows say, as the pipeline's JobStatus (the page's), its requests gone
    from Redis (request and combine None)."""
    reports = {c.chunk: jobs.ChunkReport(
        c.chunk, c.rows_in, int(c.rows_out or 0), float(c.seconds or 0), int(c.attempt or 0),
        c.worker, c.part_written_by, c.input_bytes, c.shuffle_read_bytes,
        c.shuffle_write_bytes) for c in chunk_rows if c.state == "done"}
    letters: list[Letter] = [
        KeptLetter(id=d["id"], request_id=d["request"], task_id=d["task"],
                   payload=d["payload"], error=d["error"], traceback="",
                   attempts=int(d["attempts"]), worker=d["worker"], ts_ms=int(d["ts_ms"]),
                   handler=d["handler"], tenant=d["tenant"], fingerprint=d["fingerprint"])
        for d in (json.loads(row.letters) if row.letters else [])]
    st = jobs.JobStatus(
        row.job_id, JobSpec.from_dict(json.loads(row.spec)), row.state, row.chunks, reports,
        json.loads(row.manifest) if row.manifest else None,
        json.loads(row.failures) if row.failures else [], None, None, letters)
    st.cancelled = row.cancelled
    return st

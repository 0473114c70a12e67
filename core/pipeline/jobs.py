"""A data job on the queue: submitting it, and reading how it goes.

A job `J` is two requests of one queue, both run by the handler `datajob`:

- `J` (the chunk request), created open with one split task; the split task reads the input,
  stages it as N Parquet chunks and adds one chunk task per chunk as each is written
  (add / seal), then seals the request;
- `J.combine`, a follow-up of `J`: held until `J` completes as done, then its one task
  combines the parts, writes the manifest and `_SUCCESS`. The engine starts it exactly once,
  in the same atomic call that records `J`'s completion.

Both are created, with the job's record, by one atomic engine call (Producer.submit_flow), so
a crash during a submit leaves the whole job or nothing.

The job's own record (the engine's records of kind "datajob": records()) holds the spec, the
split's plan and Spark's EXPLAIN of the job's SQL, each chunk's report (rows in and out,
seconds, attempt, worker, Spark's input and shuffle bytes) and, once done, the manifest; the
mirror copies it into the database (core.mirror.datajobs), where it outlives its 7 days.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from core.queue import (
    FollowUp,
    InvalidInput,
    Queue,
    RequestIdTaken,
    UnknownRequest,
    read,
)
from core.queue.models import DeadLetter, RequestInfo
from core.queue.records import Records

from .reports import ChunkReport as ChunkReport  # re-exported: jobs.ChunkReport
from .spec import JobSpec, SpecError
from .unique_output import output_key

log = logging.getLogger("queueadmin.pipeline")
HANDLER = "datajob"
RECORD_KIND = "datajob"
RECORD_TTL_S = 7 * 86_400  # the job's record outlives its requests' default retention
MAX_SPEC_BYTES = 60 * 1024  # a task's payload is at most 64 KiB: the spec and a few fields


def combine_id(job_id: str) -> str:
    return f"{job_id}.combine"


def records(q: Queue) -> Records:
    """The queue's data job records (the engine's core.queue.records, kind "datajob"), and
    their index by submit time (ms), so that `datajob clean` finds them without scanning the
    keyspace; entries older than the records' life are dropped by it."""
    return q.records(RECORD_KIND)


def payload(op: str, spec: JobSpec, **extra: Any) -> dict[str, Any]:
    return {"op": op, "job": spec.job_id, **extra, "spec": spec.to_dict()}


def default_concurrency() -> int:
    """Chunks of one job at once when the submit does not say (QA_DATAJOB_CONCURRENCY)."""
    from django.conf import settings

    return int(getattr(settings, "DATAJOB_CONCURRENCY", 1_000_000))


@dataclass(frozen=True)
class QueueOptions:
    priority: int = 50
    concurrency: int = field(default_factory=default_concurrency)
    tenant: str = "default"
    max_attempts: int = 3


class JobIdTaken(SpecError):
    """The job id is already the id of a request that is not this data job's."""


def _not_a_job(q: Queue, rid: str, info: RequestInfo, what: str) -> JobIdTaken:
    kind = (f"the follow-up of request {info.after}" if info.after
            else f"a request of handler {info.handler!r}")
    return JobIdTaken(
        f"--request-id {rid.removesuffix('.combine')!r}: request {rid} already exists in "
        f"queue {q.name!r} and is not {what} (it is {kind}, {info.state}); choose another "
        "job id")


def check_id_free(q: Queue, job_id: str) -> None:
    """JobIdTaken unless `job_id` and its combine id are free, or are this data job's own
    requests (a retried submit, or one that stopped half-way). Otherwise the job would never
    split and its combine would wait forever: `J` already exists, so it is not made again."""
    _check_id_free(q, job_id)


def _check_id_free(q: Queue, job_id: str) -> RequestInfo | None:
    """check_id_free(), returning the job's chunk request as it is now (None: none)."""
    req = read.request(q, job_id)
    if req is not None and (
        req.handler != HANDLER or req.after is not None
        or (not records(q).has(job_id, "spec")
            and not (req.state == "open" and req.total == 0))
    ):
        raise _not_a_job(q, job_id, req, "a data job")
    comb = read.request(q, combine_id(job_id))
    if comb is not None and (comb.handler != HANDLER or comb.after != job_id):
        raise _not_a_job(q, combine_id(job_id), comb,
                         f"the combine step of data job {job_id}")
    if comb is not None and req is None:
        raise _combine_left(q, job_id, comb.state)
    return req


def _combine_left(q: Queue, job_id: str, state: str) -> JobIdTaken:
    """The combine step of an earlier run is still there though its chunk request expired:
    a new run could not hold its own combine step behind its chunks."""
    return JobIdTaken(
        f"--request-id {job_id!r}: the combine step {combine_id(job_id)} of an earlier run of "
        f"data job {job_id} is still in queue {q.name!r} ({state}), though its chunk request "
        "has expired; choose another job id, or submit again once it has expired too (a held "
        "one must be cancelled first)")


def check_tasks(q: Queue, spec: JobSpec) -> None:
    """SpecError unless the queue takes the job's split and combine tasks, which carry its
    spec: checked by the engine's own encoder (JSON, the queue's payload limit) before
    anything is written, so that a refusal never leaves a job opened and not queued."""
    try:
        q._encode([payload("split", spec), payload("combine", spec)])
    except InvalidInput as exc:
        raise SpecError(f"the job's tasks cannot carry its description: {exc}") from None


def check_size(spec: JobSpec) -> None:
    """SpecError when the job's description is too big for its tasks (they carry it)."""
    size = len(spec.to_json().encode("utf-8", "surrogatepass"))
    if size > MAX_SPEC_BYTES:
        raise SpecError(f"the job's SQL, combine SQL and paths take {size:,} bytes together; "
                        f"at most {MAX_SPEC_BYTES // 1024} KiB (a task carries them all)")


def submit(q: Queue, spec: JobSpec, options: QueueOptions | None = None, *,
           run_at: datetime | None = None, delay: float | None = None,
           unique_output: bool = True) -> bool:
    """Queue the job (spec checked by make_spec); False, with nothing changed, if a job of
    this id existed or (`unique_output`) another job writing its output waits or runs (which:
    read.unique_holder(q, output_key(spec.output))). JobIdTaken or SpecError, with nothing
    written, if the id (or its combine id) is another request's, or the job's description
    does not fit in its tasks. With `run_at` or `delay` the chunk request is scheduled.

    One engine call (Producer.submit_flow) writes the chunk request, open, with its split
    task; the combine request held behind it; the job's record: all or nothing; a job whose
    requests expired before its record runs again as a new job (its old record replaced)."""
    o = options or QueueOptions()
    check_size(spec)
    check_tasks(q, spec)
    req = _check_id_free(q, spec.job_id)
    opts: dict[str, Any] = {"priority": o.priority, "tenant": o.tenant,
                            "max_attempts": o.max_attempts}
    if req is not None and req.total == 0 and req.state in ("open", "scheduled"):
        return _finish_half_made(q, spec, opts)
    now_ms = int(time.time() * 1000)
    record = records(q).new(spec.job_id, {"spec": spec.to_json(), "queue": q.name,
                                          "created_ms": now_ms},
                            keep_s=RECORD_TTL_S, at_ms=now_ms)
    combine = FollowUp([payload("combine", spec)], handler=HANDLER,
                       request_id=combine_id(spec.job_id), **opts)
    # Open, so that the split adds the chunks as it writes them, then seals it.
    try:
        flow = q.submit_flow([payload("split", spec)], handler=HANDLER,
                             request_id=spec.job_id, seal=False, run_at=run_at, delay=delay,
                             concurrency=o.concurrency, then=combine, record=record, **opts,
                             unique_key=output_key(spec.output) if unique_output else None)
    except RequestIdTaken as exc:  # the combine id was taken since the check: say by what
        _check_id_free(q, spec.job_id)
        raise JobIdTaken(f"--request-id {spec.job_id!r}: {exc}") from None
    return flow.created


def _finish_half_made(q: Queue, spec: JobSpec, opts: dict[str, Any]) -> bool:
    """A job that the four-call submit of earlier versions left half-made (its chunk request
    opened, and a crash before its split was added): its record, combine step and split are
    added now, each step idempotent, so a submit again finishes it."""
    now_ms = int(time.time() * 1000)
    created = records(q).create(spec.job_id, {"spec": spec.to_json(), "queue": q.name,
                                              "created_ms": now_ms},
                                keep_s=RECORD_TTL_S, at_ms=now_ms)
    q.submit_after(spec.job_id, [payload("combine", spec)], handler=HANDLER,
                   request_id=combine_id(spec.job_id), **opts)
    info = read.request(q, spec.job_id)
    if info is not None and info.total == 0 and info.state in ("open", "scheduled"):
        q.add(spec.job_id, [payload("split", spec)])
    return created


@dataclass
class JobStatus:
    """A job as the queue and its record show it now."""

    job_id: str
    spec: JobSpec | None
    state: str  # running, done, failed, cancelled, unknown
    chunks: int | None  # known once the split has counted the input
    reports: dict[int, ChunkReport] = field(default_factory=dict)
    manifest: dict[str, Any] | None = None
    failures: list[str] = field(default_factory=list)  # which task failed, and why
    request: RequestInfo | None = None
    combine: RequestInfo | None = None
    letters: list[DeadLetter] = field(default_factory=list)  # the job's dead letters
    cancelled: bool = False  # an operator cancelled it (its state may still say failed)

    @property
    def cleanable(self) -> bool:
        """Whether its staging may go: cancelled (also after failing) or expired; never a
        running, held, done or failed job (requeuing a failed job's letter finishes it)."""
        return self.state in CLEANABLE or (self.state == "failed" and self.cancelled)

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed", "cancelled")

    @property
    def cancellable(self) -> bool:
        """Whether a cancel still stops something: the job runs, or it failed with its combine
        step held (the cancel drops that step, and the staging a requeue would have used)."""
        return not self.finished or (
            self.state == "failed" and self.combine is not None and self.combine.state == "held")


def describe_letter(letter: DeadLetter) -> str:
    """Which task of a job a dead letter is (the split, chunk k, the combine), and why."""
    try:
        p = json.loads(letter.payload)
    except ValueError:
        p = {}
    op = p.get("op") if isinstance(p, dict) else None
    what = {"split": "the split", "combine": "the combine step"}.get(str(op), "a task")
    if op == "chunk":
        what = f"chunk {p.get('chunk')}"
    tries = f"{letter.attempts} attempt{'' if letter.attempts == 1 else 's'}"
    return (f"{what} failed after {tries} (dead letter {letter.id}): "
            f"{letter.error}")


def status(q: Queue, job_id: str, rec: dict[str, str] | None = None) -> JobStatus:
    """The job's state, chunks, reports, manifest and failures, from Redis (`rec`: its record
    as read already)."""
    rec = records(q).all(job_id) if rec is None else rec
    spec = JobSpec.from_dict(json.loads(rec["spec"])) if "spec" in rec else None
    req = read.request(q, job_id)
    comb = read.request(q, combine_id(job_id))
    reports = {int(k.split(":", 1)[1]): ChunkReport.from_json(v)
               for k, v in rec.items() if k.startswith("chunk:")}
    manifest = json.loads(rec["manifest"]) if "manifest" in rec else None
    if manifest is None and comb is not None and comb.state == "done":
        # The combine step ended between the record's read and its request's: its manifest,
        # written before it ended, is there now (a done job is never shown without it).
        text = records(q).get(job_id, "manifest")
        manifest = json.loads(text) if text else None
    letters = [d for rid in (job_id, combine_id(job_id))
               for d in read.request_dead_letters(q, rid)]
    failures = [describe_letter(d) for d in letters]
    chunks = int(rec["chunks"]) if "chunks" in rec else None
    st = JobStatus(job_id, spec, "running", chunks, reports, manifest, failures, req, comb,
                   letters)
    cancelled = any(r is not None and r.state in ("cancelled", "cancelling") for r in (req, comb))
    dead = any(r is not None and r.dead > 0 for r in (req, comb))
    st.cancelled = cancelled
    if manifest is not None or (comb is not None and comb.state == "done"):
        st.state = "done"
    elif cancelled and not dead:
        st.state = "cancelled"
    elif req is None and comb is None:
        st.state = "unknown" if spec is None else "expired"
    elif cancelled or any(r is not None and r.state == "failed" for r in (req, comb)):
        st.state = "failed"  # cancelled after a task failed: the failure is what it tells
    elif (req is not None and req.state == "open" and req.dead > 0
          and req.waiting + req.leased + req.delayed == 0):
        st.state = "failed"  # the split ran out of attempts: nothing else will run
    elif req is not None and req.state == "scheduled":
        st.state = "scheduled"  # delayed: its split waits for its due time
    return st


def wait(q: Queue, job_id: str, *, timeout: float | None = None, poll: float = 0.25,
         on_change: Any = None) -> JobStatus:
    """Follow the job until it finishes (or `timeout` s); `on_change(status)` after each change.
    It wakes the moment either of the job's requests completes (the engine's announcement of
    it), and reads the chunks' progress every 0.05 s at first, slowing down to every `poll` s
    over the first ten seconds. It slept between reads before: a job was seen done up to a
    poll after it was (0.05-0.25 s of a small job's 1-2 s)."""
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    last: tuple[Any, ...] | None = None
    with q.completions([job_id, combine_id(job_id)]) as woken:
        while True:
            st = status(q, job_id)
            seen = (st.state, st.chunks, len(st.reports), len(st.failures),
                    st.request.done if st.request else None)
            if seen != last and on_change is not None:
                on_change(st)
            last = seen
            now = time.monotonic()
            if st.finished or (deadline is not None and now > deadline):
                return st
            pause = min(poll, 0.05 + (now - started) / 40)
            woken(pause if deadline is None else min(pause, max(0.0, deadline - now)))


# -- cancel and clean up -----------------------------------------------------------------

CANCEL_WAIT_S = 30.0  # how long `datajob cancel` waits for running tasks to stop


def job_of(q: Queue, request_id: str) -> str | None:
    """The data job whose request `request_id` is (its chunk request or its combine
    follow-up, while the job's record lasts), or None for any other request."""
    info = read.request(q, request_id)
    if info is not None and info.handler != HANDLER:
        return None
    job = request_id
    if info is not None and info.after is not None:
        if request_id != combine_id(info.after):
            return None
        job = info.after
    return job if records(q).has(job, "spec") else None


@dataclass(frozen=True)
class Cleanup:
    """What became of a job's staging directory."""

    job_id: str
    state: str  # the job's state after the cancel (done, cancelled, ...)
    staging: Path | None  # None: the job's record (hence where its staging is) is gone
    removed_bytes: int | None = None  # None: nothing removed (see `leased`, `state`)
    leased: int = 0  # tasks of the job still running when it gave up waiting

    def describe(self) -> str:
        if self.staging is None:
            return f"data job {self.job_id}: its record has expired; staging unknown"
        if self.removed_bytes is not None:
            return (f"data job {self.job_id}: removed its staging {self.staging} "
                    f"({self.removed_bytes:,} bytes)")
        if self.leased:
            tasks = "1 task" if self.leased == 1 else f"{self.leased} tasks"
            return (f"data job {self.job_id}: {tasks} still stopping; its "
                    f"workers remove its staging {self.staging} once they have stopped "
                    "(else `manage.py datajob clean` does)")
        if self.state == "done":
            return f"data job {self.job_id} is done: its output stays, and it left no staging"
        if self.state not in CLEANABLE:
            return f"data job {self.job_id} is {self.state}: its staging {self.staging} stays"
        return f"data job {self.job_id}: no staging left"


CLEANABLE = ("cancelled", "expired")  # never a running, held, failed or done job


def _leased(q: Queue, job_id: str) -> tuple[int, bool]:
    """Tasks of the job leased now, and whether a request of it is still stopping."""
    infos = [read.request(q, rid) for rid in (job_id, combine_id(job_id))]
    leased = sum(i.leased for i in infos if i is not None)
    return leased, any(i is not None and i.state == "cancelling" for i in infos)


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):  # gone meanwhile
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def remove_staging(q: Queue, job_id: str, *, dry_run: bool = False) -> Cleanup:
    """Remove the job's staging directory if the job is cancelled or gone (its requests
    expired) and none of its tasks is leased; else leave it and say why. A failed job keeps
    its staging: requeuing its dead letter finishes it from there."""
    st = status(q, job_id)
    if st.spec is None:
        return Cleanup(job_id, st.state, None)
    staging = st.spec.staging
    leased, stopping = _leased(q, job_id)
    if not st.cleanable or leased or stopping:
        return Cleanup(job_id, st.state, staging, None, max(leased, int(stopping)))
    state = "cancelled" if st.cancelled else st.state  # what the cancel made of it
    if not staging.exists():
        return Cleanup(job_id, state, staging)
    size = _dir_bytes(staging)
    if not dry_run:
        shutil.rmtree(staging, ignore_errors=True)
    return Cleanup(job_id, state, staging, size)


def cancel(q: Queue, job_ids: Iterable[str], *, wait_s: float = CANCEL_WAIT_S,
           poll: float = 0.25) -> list[Cleanup]:
    """Cancel each job's two requests (the chunks not started are dropped, running ones stop
    at their next lease renewal: the worker cancels their Spark job group), wait up to
    `wait_s` (one deadline for all) until none of their tasks is leased, then remove their
    staging data. A job still running then keeps its staging (Cleanup.leased says so) until
    `datajob clean`. UnknownRequest for an id that is no data job of the queue."""
    ids = list(dict.fromkeys(job_ids))
    for job_id in ids:
        if not records(q).has(job_id, "spec"):
            raise UnknownRequest(f"no data job {job_id!r} in queue {q.name!r} (or its record "
                                 "has expired)")
    for job_id in ids:
        for rid in (job_id, combine_id(job_id)):
            with contextlib.suppress(UnknownRequest):  # expired, or never made
                q.cancel(rid)
    _wait_stopped(q, ids, wait_s, poll)
    return [remove_staging(q, job_id) for job_id in ids]


def _wait_stopped(q: Queue, job_ids: list[str], wait_s: float, poll: float) -> None:
    """Until no task of these jobs is leased or stopping, or `wait_s` has passed."""
    deadline = time.monotonic() + wait_s
    while any(sum(_leased(q, j)) for j in job_ids) and time.monotonic() < deadline:
        time.sleep(poll)


STOPPED_WAIT_S = 300.0  # how long a worker watches a cancelled job for its tasks to stop
_WATCHED: set[tuple[str, str]] = set()  # (queue, job) watched by this process
_WATCHED_LOCK = threading.Lock()


def clean_when_stopped(q: Queue, job_id: str, *, within_s: float = STOPPED_WAIT_S,
                       poll: float = 0.5) -> threading.Thread | None:
    """In the background, from a worker whose task of a cancelled job is stopping: once no
    task of the job is leased (this one included), remove its staging (remove_staging). One
    watcher per job in a process; none if one is already watching. It gives up after
    `within_s`, and dies with its process: `datajob clean` finds what it leaves."""
    key = (q.name, job_id)
    with _WATCHED_LOCK:
        if key in _WATCHED:
            return None
        _WATCHED.add(key)

    def watch() -> None:
        try:
            _wait_stopped(q, [job_id], within_s, poll)
            got = remove_staging(q, job_id)
            if got.removed_bytes is not None:
                log.info("data job %s cancelled: removed its staging %s (%s bytes)", job_id,
                         got.staging, f"{got.removed_bytes:,}")
            elif got.leased:
                log.warning("%s", got.describe())
        except Exception:  # Redis away, a filesystem error: `datajob clean` does it later
            log.exception("data job %s cancelled: its staging was not removed", job_id)
        finally:
            with _WATCHED_LOCK:
                _WATCHED.discard(key)

    t = threading.Thread(target=watch, name=f"clean-{job_id}", daemon=True)
    t.start()
    return t


def clean(q: Queue, *, dry_run: bool = False) -> list[Cleanup]:
    """Remove the staging data of every job of the queue that is cancelled or gone and has no
    task running; running, held, failed and done jobs are not touched. Walks the queue's
    index of jobs (records()), page by page, and drops from it the jobs whose record expired."""
    out = []
    start = 0
    rec = records(q)
    while ids := rec.indexed(start, start + 499):
        start += len(ids)
        for job_id in ids:
            got = remove_staging(q, job_id, dry_run=dry_run)
            if got.removed_bytes is not None:
                out.append(got)
    if not dry_run:  # records gone (7 days): nothing more to find by them
        expire_before = int(time.time() * 1000) - RECORD_TTL_S * 1000
        rec.unindex_before(expire_before)
    return sorted(out, key=lambda c: c.job_id)

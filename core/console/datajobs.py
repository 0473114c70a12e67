"""What the Data jobs page shows of a job, read without Spark: its status from Redis (the
pipeline's own record) while Redis has it, else from the database (the mirror's copy:
core.mirror.datajobs), with its split, timings and EXPLAIN texts either way; the list of jobs
from the database; and the first rows of a complete output read with pyarrow."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from core.mirror.datajobs import group_of, status_of
from core.models.datajobs import DataJob
from core.pipeline import jobs, roots
from core.pipeline.spec import SUCCESS, JobSpec, SpecError
from core.queue import Queue, read
from core.queue.models import DeadLetter

from . import jobtime

PREVIEW_ROWS = 20


REASON_CHARS = 160  # of a failed chunk's error, on the page (the dead letter has it all)
# Pending entries read per view of a job to tell its running chunks: the page polls, so the
# cost is bounded; leased tasks past these show in the summary line's count only.
RUNNING_SCAN = 100


@dataclass(frozen=True)
class Chunk:
    index: int
    state: str  # done, failed (its task is a dead letter), running (leased), or pending
    rows_in: int | None = None
    rows_out: int | None = None
    seconds: float | None = None
    attempt: int | None = None
    worker: str = ""
    input_bytes: int | None = None  # as Spark reported them (None: it did not)
    shuffle_read: int | None = None
    shuffle_write: int | None = None
    reason: str = ""  # failed: the dead letter's error, shortened
    letter: str = ""  # failed: the dead letter's id
    fingerprint: str = ""  # failed: its group on the Dead letters page


@dataclass(frozen=True)
class Unsplit:
    """Why a finished job has no chunks: its split failed (with why), or it was cancelled."""

    text: str
    letter: str = ""  # the split's dead letter, if it has one
    fingerprint: str = ""


@dataclass(frozen=True)
class Cell:
    text: str
    numeric: bool = False  # right-aligned


@dataclass(frozen=True)
class Preview:
    columns: list[str]
    rows: list[list[Cell]]
    error: str = ""

    @property
    def headers(self) -> list[tuple[str, bool]]:
        """Each column's name, and whether it is numeric (every value shown is a number):
        a numeric column's header is right-aligned over its values."""
        return [(c, any(len(r) > i and r[i].text for r in self.rows)
                 and all(r[i].numeric for r in self.rows if len(r) > i and r[i].text))
                for i, c in enumerate(self.columns)]


def chunks_of(st: jobs.JobStatus, running: frozenset[int] = frozenset()) -> list[Chunk]:
    """One row per chunk once the split has counted them: reported chunks with their
    figures, chunks whose task is a dead letter as failed (with why); the rest cancelled if
    the job was, else running (those in `running`) or pending."""
    n = st.chunks if st.chunks is not None else len(st.reports)
    dead = _dead_chunks(st.letters)
    out = []
    for k in range(n):
        r = st.reports.get(k)
        letter = dead.get(k)
        if r is not None:
            out.append(Chunk(k, "done", r.rows_in, r.rows_out, r.seconds, r.attempt, r.worker,
                             r.input_bytes, r.shuffle_read_bytes, r.shuffle_write_bytes))
        elif letter is not None:
            out.append(Chunk(k, "failed", attempt=letter.attempts, worker=letter.worker,
                             reason=reason(letter.error, f"chunk {k} of job {st.job_id}"),
                             letter=letter.id, fingerprint=group_of(letter)))
        elif st.cancelled:  # never to run (one still stopping is released, not finished)
            out.append(Chunk(k, "cancelled"))
        elif k in running:
            out.append(Chunk(k, "running"))
        else:
            out.append(Chunk(k, "pending"))
    return out


def running_chunks(q: Queue, st: jobs.JobStatus) -> frozenset[int]:
    """The chunks whose tasks are leased to a worker now: the first RUNNING_SCAN entries of
    the request's pending list (leased and parked tasks only; unread ones are not in it) and
    one pipelined read of the leased tasks' payloads. Nothing read unless some are leased."""
    if st.finished or st.request is None or st.request.leased == 0:
        return frozenset()
    leased = [e.task_id for e in read.pending(q, st.job_id, count=RUNNING_SCAN)
              if not e.consumer.startswith("~")]
    if not leased:
        return frozenset()
    out = set()
    for text in read.task_payloads(q, st.job_id, leased).values():
        k = _chunk_of(text)
        if k is not None:
            out.add(k)
    return frozenset(out)


def progress(st: jobs.JobStatus, chunks: list[Chunk]) -> str:
    """One line over the chunks table: "12 of 20 done, 2 running, 6 waiting" (and failed),
    running from the request's leased count, which holds however many chunks are leased."""
    if not chunks:
        return ""
    done = sum(1 for c in chunks if c.state == "done")
    failed = sum(1 for c in chunks if c.state == "failed")
    left = len(chunks) - done - failed
    running = sum(1 for c in chunks if c.state == "running")
    if st.request is not None and not st.finished:
        running = max(running, min(st.request.leased, left))
    parts = [f"{done:,} of {len(chunks):,} done"]
    if failed:
        parts.append(f"{failed:,} failed")
    if not st.finished:
        parts += [f"{running:,} running", f"{left - running:,} waiting"]
    return ", ".join(parts)


def unsplit(st: jobs.JobStatus) -> Unsplit | None:
    """What the chunks table says of a failed or cancelled job whose split recorded no
    chunk count (None for any other job: "Not split yet")."""
    if st.chunks is not None or st.reports or st.state not in ("failed", "cancelled"):
        return None
    if st.state == "cancelled":
        return Unsplit("Cancelled before it was split.")
    for d in reversed(st.letters):
        if _op_of(d.payload) == "split":
            why = reason(d.error, f"the split of job {st.job_id}")
            return Unsplit(f"The split failed: {why}", d.id, group_of(d))
    first = st.failures[0] if st.failures else "no dead letter says why"
    return Unsplit(f"The job failed before its split counted the chunks: {first}")


def _op_of(payload: str) -> str | None:
    try:
        p = json.loads(payload)
    except ValueError:
        return None
    return str(p.get("op")) if isinstance(p, dict) else None


def _chunk_of(payload: str) -> int | None:
    try:
        p = json.loads(payload)
    except ValueError:
        return None
    if isinstance(p, dict) and p.get("op") == "chunk" and isinstance(p.get("chunk"), int):
        return int(p["chunk"])
    return None


def _dead_chunks(letters: list[DeadLetter]) -> dict[int, DeadLetter]:
    """Chunk number -> its task's dead letter (the latest, if several)."""
    out: dict[int, DeadLetter] = {}
    for d in letters:
        k = _chunk_of(d.payload)
        if k is not None and (k not in out or d.id > out[k].id):  # later ids are bigger
            out[k] = d
    return out


def reason(error: str, where: str) -> str:
    """A dead letter's error without what the page says already (the exception the pipeline
    wraps it in, `where`: "chunk 3 of job J"), cut to REASON_CHARS."""
    text = " ".join(error.split())
    text = text.removeprefix("DataJobError: ").removeprefix("JvmDied: ")
    text = text.removeprefix(f"{where}: ")
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1].rstrip() + "…"


def preview(spec: JobSpec | None, *, rows: int = PREVIEW_ROWS) -> Preview | None:
    """The first rows of a complete output (with _SUCCESS), as text; None before that, and
    for an output outside the output roots (a record in Redis is not trusted either)."""
    if spec is None:
        return None
    try:
        roots.check_output(spec.output, roots.from_settings())
    except SpecError:
        return None
    if not (Path(spec.output) / SUCCESS).exists():
        return None
    try:
        if spec.output_format == "csv":
            return _preview_csv(Path(spec.output), rows)
        return _preview_parquet(Path(spec.output), rows)
    except (OSError, ValueError) as exc:  # pyarrow's errors are ValueErrors (ArrowInvalid)
        return Preview([], [], f"cannot read {spec.output}: {exc}")


def _preview_parquet(out: Path, rows: int) -> Preview:
    import pyarrow.parquet as pq

    files = sorted(p for p in out.glob("*.parquet") if not p.name.startswith((".", "_")))
    if not files:
        files = sorted(p for p in out.iterdir() if p.name.startswith("part-"))
    columns: list[str] = []
    got: list[list[Cell]] = []
    for f in files:
        pf = pq.ParquetFile(f)
        columns = columns or list(pf.schema_arrow.names)
        for batch in pf.iter_batches(batch_size=rows):
            got += [[_cell(v) for v in row.values()] for row in batch.to_pylist()]
            break
        if len(got) >= rows:
            break
    return Preview(columns, got[:rows])


def _preview_csv(out: Path, rows: int) -> Preview:
    import csv

    files = sorted(out.glob("part-*.csv"))
    if not files:
        return Preview([], [])
    with open(files[0], newline="") as fh:
        reader = csv.reader(fh)
        columns = next(reader, [])
        got = [[_csv_cell(v) for v in row] for _, row in zip(range(rows), reader, strict=False)]
    return Preview(columns, got)


def _cell(v: Any) -> Cell:
    """Ints with thousands separators, floats as they are; both right-aligned."""
    if isinstance(v, bool) or v is None:
        return Cell("" if v is None else str(v))
    if isinstance(v, int):
        return Cell(f"{v:,}", numeric=True)
    if isinstance(v, (float, Decimal)):
        return Cell(str(v), numeric=True)
    return Cell(str(v))


def _csv_cell(v: str) -> Cell:
    """A CSV field as its number if it reads as one (not a code such as "007": that stays
    text), else as written."""
    if _INT.fullmatch(v):
        return _cell(int(v))
    if _FLOAT.fullmatch(v):
        return Cell(v, numeric=True)
    return Cell(v)


_INT = re.compile(r"-?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(0|[1-9][0-9]*)\.[0-9]+([eE][-+]?[0-9]+)?")


def manifest_text(st: jobs.JobStatus) -> str:
    return json.dumps(st.manifest, indent=2, sort_keys=False) if st.manifest else ""


def status(q: Queue, job_id: str) -> jobs.JobStatus:
    return jobs.status(q, job_id)


@dataclass(frozen=True)
class Facts:
    """What the job's page shows beside its status: where it was read, its split, its
    timings and Spark's EXPLAIN of its SQL (captured at the split)."""

    source: str  # "redis" (live) or "database" (Redis has forgotten the job)
    copied_at: datetime | None = None  # database: when the mirror last copied it
    split_how: str = ""
    input_rows: int | None = None
    split_seconds: float | None = None
    created_at: datetime | None = None
    finished_at: datetime | None = None
    explain_sql: str = ""
    explain_combine: str = ""
    figures: dict[str, str] = field(default_factory=dict)  # the record's timings (jobtime)

    @property
    def live(self) -> bool:
        return self.source == "redis"


def _ms(text: str | None) -> datetime | None:
    return datetime.fromtimestamp(int(text) / 1000, tz=UTC) if text and text.isdigit() else None


def _num(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None


def _record_facts(rec: dict[str, str], st: jobs.JobStatus) -> Facts:
    rows = rec.get("rows", "")
    ends = [r.finished_ms for r in (st.request, st.combine) if r is not None and r.finished_ms]
    return Facts("redis", None, rec.get("split", ""),
                 int(rows) if rows.isdigit() else None, _num(rec.get("split_seconds")),
                 _ms(rec.get("created_ms")),
                 _ms(str(max(ends))) if st.finished and ends else None,
                 rec.get("explain_sql", ""), rec.get("explain_combine", ""),
                 {k: rec[k] for k in jobtime.FIGURES if k in rec})


def time_bars(st: jobs.JobStatus, facts: Facts) -> jobtime.JobTime | None:
    """Where the job's time went (its page's bars)."""
    return jobtime.of_status(st.manifest, facts.figures,
                             [dataclasses.asdict(r) for r in st.reports.values()])


def _row_facts(row: DataJob) -> Facts:
    return Facts("database", row.updated_at, row.split_how, row.input_rows, row.split_seconds,
                 row.created_at, row.finished_at, row.explain_sql, row.explain_combine)


def shown(q: Queue, job_id: str) -> tuple[jobs.JobStatus, Facts] | None:
    """The job as its page shows it: from Redis while its record and requests are there, else
    from the database (the mirror's copy); None when neither has it."""
    rec = jobs.records(q).all(job_id)
    live = jobs.status(q, job_id, rec) if "spec" in rec else None
    if live is not None and live.state != "expired":
        return live, _record_facts(rec, live)
    row = DataJob.objects.filter(queue=q.name, job_id=job_id).first()
    if row is not None:
        return status_of(row, row.chunk_rows.all()), _row_facts(row)
    # Its requests expired and the mirror never copied it: what its record still says.
    return None if live is None else (live, _record_facts(rec, live))


@dataclass(frozen=True)
class Listed:
    """A job's line in the list: its row, with a running job's state read live."""

    job_id: str
    state: str
    spec: JobSpec | None
    chunks: int | None
    done_chunks: int
    created_at: datetime
    finished: bool


LIST_COLUMNS = ("id", "queue", "job_id", "state", "spec", "chunks", "chunks_done",
                "created_at", "finished_at")


def listed(q: Queue, rows: list[DataJob]) -> list[Listed]:
    """The lines of a page of the list: each row as the database has it; a job not finished
    there is read from Redis (its record and requests), which the mirror copies every few
    seconds, so that the first page moves as its jobs run."""
    out = []
    for row in rows:
        try:
            spec: JobSpec | None = JobSpec.from_dict(json.loads(row.spec))
        except (ValueError, TypeError, KeyError):
            spec = None
        state, chunks, done = row.state, row.chunks, row.chunks_done
        if row.finished_at is None and spec is not None:
            st = jobs.status(q, row.job_id)
            if st.spec is not None and st.state != "expired":
                state, chunks, done = st.state, st.chunks, len(st.reports)
        out.append(Listed(row.job_id, state, spec, chunks, done, row.created_at,
                          state in ("done", "failed", "cancelled", "expired")))
    return out

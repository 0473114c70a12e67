"""What the Data jobs page shows of a job, read without Spark: its status from Redis (the
pipeline's own record), and the first rows of a complete output read with pyarrow."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.mirror.fingerprint import fingerprint
from core.pipeline import jobs
from core.pipeline.spec import SUCCESS, JobSpec
from core.queue import Queue
from core.queue.models import DeadLetter

PREVIEW_ROWS = 20


REASON_CHARS = 160  # of a failed chunk's error, on the page (the dead letter has it all)


@dataclass(frozen=True)
class Chunk:
    index: int
    state: str  # done, failed (its task is a dead letter), or pending (not reported yet)
    rows_in: int | None = None
    rows_out: int | None = None
    seconds: float | None = None
    attempt: int | None = None
    worker: str = ""
    reason: str = ""  # failed: the dead letter's error, shortened
    letter: str = ""  # failed: the dead letter's id
    fingerprint: str = ""  # failed: its group on the Dead letters page


@dataclass(frozen=True)
class Preview:
    columns: list[str]
    rows: list[list[str]]
    error: str = ""


def chunks_of(st: jobs.JobStatus) -> list[Chunk]:
    """One row per chunk once the split has counted them: reported chunks with their
    figures, chunks whose task is a dead letter as failed (with why), the rest pending."""
    n = st.chunks if st.chunks is not None else len(st.reports)
    dead = _dead_chunks(st.letters)
    out = []
    for k in range(n):
        r = st.reports.get(k)
        letter = dead.get(k)
        if r is not None:
            out.append(Chunk(k, "done", r.rows_in, r.rows_out, r.seconds, r.attempt, r.worker))
        elif letter is not None:
            out.append(Chunk(k, "failed", attempt=letter.attempts, worker=letter.worker,
                             reason=reason(letter.error, st.job_id, k), letter=letter.id,
                             fingerprint=fingerprint(letter.handler, letter.error).fingerprint))
        else:
            out.append(Chunk(k, "pending"))
    return out


def _dead_chunks(letters: list[DeadLetter]) -> dict[int, DeadLetter]:
    """Chunk number -> its task's dead letter (the latest, if several)."""
    out: dict[int, DeadLetter] = {}
    for d in letters:
        try:
            p = json.loads(d.payload)
        except ValueError:
            continue
        if isinstance(p, dict) and p.get("op") == "chunk" and isinstance(p.get("chunk"), int):
            k = p["chunk"]
            if k not in out or d.id > out[k].id:  # stream ids of one length: later is bigger
                out[k] = d
    return out


def reason(error: str, job_id: str, k: int) -> str:
    """A dead letter's error without what the page says already (the exception the pipeline
    wraps it in, which chunk of which job), cut to REASON_CHARS."""
    text = " ".join(error.split())
    text = text.removeprefix("DataJobError: ").removeprefix("JvmDied: ")
    text = text.removeprefix(f"chunk {k} of job {job_id}: ")
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1].rstrip() + "…"


def preview(spec: JobSpec | None, *, rows: int = PREVIEW_ROWS) -> Preview | None:
    """The first rows of a complete output (with _SUCCESS), as text; None before that."""
    if spec is None or not (Path(spec.output) / SUCCESS).exists():
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
    got: list[list[str]] = []
    for f in files:
        pf = pq.ParquetFile(f)
        columns = columns or list(pf.schema_arrow.names)
        for batch in pf.iter_batches(batch_size=rows):
            got += [[_text(v) for v in row.values()] for row in batch.to_pylist()]
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
        got = [row for _, row in zip(range(rows), reader, strict=False)]
    return Preview(columns, got)


def _text(v: Any) -> str:
    return "" if v is None else str(v)


def manifest_text(st: jobs.JobStatus) -> str:
    return json.dumps(st.manifest, indent=2, sort_keys=False) if st.manifest else ""


def status(q: Queue, job_id: str) -> jobs.JobStatus:
    return jobs.status(q, job_id)

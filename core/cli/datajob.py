"""`manage.py datajob submit|show|cancel|clean`: check a data job (without Spark), queue it,
follow it chunk by chunk; print a job's manifest; cancel it; clean up."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from django.core.management.base import CommandError

from core.cli import bad_input, command_errors, say_paused
from core.cli.due import Due, describe
from core.conf import get_queue
from core.pipeline import jobs
from core.pipeline.spec import MANIFEST, JobSpec, SpecError
from core.queue import Queue
from core.queue.keys import validate_id

if TYPE_CHECKING:
    from core.ops.actions import Result
    from core.ops.audit import Actor
    from core.ops.datajobs import Submitted

# What only --wait, show or cancel need is imported there: a plain submit answers sooner. The
# checks (core.pipeline.submission: sqlglot, the data roots, file metadata) are imported by the
# functions that check, so that `datajob --help`, show, cancel and clean never load them
# (tests/ops/test_cli_startup.py). Submit and clean are core.ops.datajobs' (permission, audit).


@contextmanager
def _nothing_done(action: str) -> Iterator[None]:
    """The service layer's refusals as the command says them: a job refused (its id taken:
    nothing written) exits 2; a refusal of the actor (audited) exits 1; and nothing is done
    if the audit log cannot be written (it could not hold the action's entry)."""
    from core.ops import audit
    from core.ops.errors import BadInput, OpsError

    try:
        audit.require_log()
        yield
    except BadInput as exc:
        raise bad_input(f"data job refused: {exc}") from exc
    except OpsError as exc:
        raise CommandError(f"{action}: nothing done: {exc}") from exc


def build_spec(
    *, input: str, format: str | None, output: str, output_format: str = "parquet",
    sql: str | None = None, transform: str | None = None, combine_sql: str | None = None,
    views: list[str] | None = None, chunks: int | str | None = None,
    rows_per_chunk: int | str | None = None, overwrite: bool = False,
    request_id: str | None = None, partition_by: list[str] | None = None,
    mode: str | None = None, incremental: bool = False, content_hash: bool = False,
) -> JobSpec:
    """The job's spec after every check (core.pipeline.submission's, the console's too, with
    no Spark: a submit takes milliseconds): CommandError with a message saying what to
    change, and nothing queued."""
    from core.pipeline import submission

    try:
        spec = submission.job_spec(
            input=input, format=format, output=output, output_format=output_format, sql=sql,
            transform=transform, combine_sql=combine_sql, views=views or [], chunks=chunks,
            rows_per_chunk=rows_per_chunk, overwrite=overwrite, request_id=request_id,
            partition_by=partition_by or [], mode=mode, incremental=incremental,
            content_hash=content_hash)
    except (SpecError, ValueError) as exc:
        raise bad_input(f"data job refused: {exc}") from exc
    return spec


def queue_options(*, priority: int | str | None = None, concurrency: int | str | None = None,
                  tenant: str | None = None,
                  max_attempts: int | str | None = None) -> jobs.QueueOptions:
    """The job's queue options, checked as the console checks them; CommandError if not."""
    from core.pipeline import submission

    try:
        return submission.queue_options(priority=priority, concurrency=concurrency,
                                        tenant=tenant, max_attempts=max_attempts)
    except SpecError as exc:
        raise bad_input(f"data job refused: {exc}") from exc


def submit(
    spec: JobSpec, *, queue: str | None = None, options: jobs.QueueOptions | None = None,
    wait: bool = False, timeout: float | None = None, stdout: TextIO | None = None,
    stderr: TextIO | None = None, actor: Actor | None = None, due: Due | None = None,
) -> jobs.JobStatus | None:
    """Queue a checked job and print its id; with `wait`, follow it and raise CommandError
    unless it ends done (saying which chunk failed and why). One audit entry, as the
    console's form writes it, with the OS user (or `actor`) as the actor."""
    from core.ops import audit, datajobs

    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    with command_errors("datajob submit"):
        q = get_queue(queue or "default")
        with _nothing_done(datajobs.SUBMIT):
            done = datajobs.submit(actor or audit.os_actor(), q.name, spec, options,
                                   run_at=due.run_at if due else None,
                                   delay=due.delay if due else None)
        _say(done, due, stdout, stderr)
        if not wait:
            return None
        return follow(q, done.job_id, timeout=timeout, stdout=stdout)


def _say(done: Submitted, due: Due | None, stdout: TextIO, stderr: TextIO) -> None:
    """The submit's outcome: its id on stdout; on stderr why the job may wait."""
    if done.no_worker:
        stderr.write(f"warning: no worker of queue {done.queue!r} runs data jobs yet (handler "
                     f"{jobs.HANDLER!r}): the job waits until one starts "
                     "(`manage.py runworker`, or `make run`)\n")
    stdout.write(f"{done.job_id}\n" if done.created else
                 f"{done.job_id} (submitted before: nothing changed)\n" if not done.same_output
                 else f"{done.job_id} (writes that output and has not finished: nothing new "
                      "was submitted)\n")
    stdout.flush()
    info = done.request
    if due and info is not None and (line := describe(info.state, info.due_ms or 0, due)):
        stderr.write(line.replace("the request", "the job") + "\n")
    if done.paused:
        say_paused(done.queue, f"data job {done.job_id}", stderr)
    if done.warming:
        # A job queued while the stack's Spark runs its first job waits for it: said, rather
        # than leave a slow first job unexplained.
        stderr.write(f"note: data job {done.job_id} waits for Spark (warming): "
                     f"{done.warming}; it starts once Spark is warm\n")
        stderr.flush()


def follow(q: Queue, job_id: str, *, timeout: float | None = None,
           stdout: TextIO | None = None) -> jobs.JobStatus:
    """Progress of the job's chunks (one line per chunk done, and on a terminal a bar) until
    it ends."""
    stdout = stdout or sys.stdout
    printed: set[int] = set()

    def lines(st: jobs.JobStatus, say: Callable[[str], object]) -> None:
        for k in sorted(set(st.reports) - printed):
            r = st.reports[k]
            say(f"chunk {k}: {_rows(r.rows_in)} rows in, {r.rows_out:,} out, {r.seconds:.2f}s "
                f"(attempt {r.attempt}, {r.worker})")
            printed.add(k)

    def plain(text: str) -> None:
        stdout.write(text + "\n")
        stdout.flush()

    try:
        if stdout.isatty():
            st = _follow_bar(q, job_id, timeout, stdout, lines)
        else:  # no bar to draw: rich (its import) is not needed
            st = jobs.wait(q, job_id, timeout=timeout, on_change=lambda st: lines(st, plain))
    except KeyboardInterrupt:
        raise CommandError(
            f"stopped following data job {job_id}; the job goes on running: "
            f"`manage.py datajob show {job_id}` follows it up, `manage.py datajob cancel "
            f"{job_id}` stops it") from None
    return finished(st, stdout)


def _follow_bar(q: Queue, job_id: str, timeout: float | None, stdout: TextIO,
                lines: Callable[[jobs.JobStatus, Callable[[str], object]], None],
                ) -> jobs.JobStatus:
    """follow() on a terminal: rich's bar of the chunks done, the lines printed above it."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(file=stdout, highlight=False)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task("splitting", total=None)

        def show(st: jobs.JobStatus) -> None:
            lines(st, console.print)
            if st.chunks is not None:
                bar.update(task, description="chunks", total=st.chunks, completed=len(st.reports))

        return jobs.wait(q, job_id, timeout=timeout, on_change=show)


def _rows(n: int | None) -> str:
    return "?" if n is None else f"{n:,}"


def finished(st: jobs.JobStatus, stdout: TextIO) -> jobs.JobStatus:
    """Print the end of a job; CommandError unless it is done."""
    if st.state == "done" and st.manifest is not None:
        m = st.manifest
        reused = m.get("reused_chunks")
        stdout.write(f"done: {_rows(m['rows_in'])} rows in, {m['rows_out']:,} rows out, "
                     f"{len(m['chunks'])} chunk{'' if len(m['chunks']) == 1 else 's'}"
                     + (f" ({len(reused)} reused from the last run)" if reused else "")
                     + (" in one step" if m.get("one_step") else "")
                     + f" -> {m['output']} ({m['output_format']})\n")
        return st
    if st.state == "failed":
        reasons = "\n".join(f"  {f}" for f in st.failures) or "  (no dead letter found)"
        raise CommandError(
            f"data job {st.job_id} failed: no _SUCCESS was written.\n{reasons}\n"
            "If the cause is in the data or around it (a file, memory, a worker), fix it and "
            "requeue the dead letter (console Dead letters page, or `manage.py requeue "
            f"--request {st.job_id}`): the job then finishes. If it is the SQL or the "
            "transform, submit the job again with it corrected (a new submit is a new job; "
            "give another --request-id if you gave one); `manage.py datajob cancel "
            f"{st.job_id}` drops this one's staging data."
        )
    if st.state == "cancelled":
        raise CommandError(f"data job {st.job_id} was cancelled: no output was marked complete")
    raise CommandError(f"data job {st.job_id} is still {st.state} (gave up waiting); "
                       f"`manage.py datajob show {st.job_id}` follows it up")


def show(target: str, *, queue: str | None = None, stdout: TextIO | None = None) -> None:
    """Print a job's manifest (by job id, or an output directory's `_manifest.json`); for a
    job not done, its state, chunks and failures."""
    stdout = stdout or sys.stdout
    path = Path(target)
    if "/" in target or path.is_dir():
        try:
            stdout.write((path / MANIFEST).read_text())
        except OSError as exc:
            raise bad_input(f"no manifest in {target}: {exc.strerror} (a job writes it "
                               "when it completes)") from exc
        return
    with command_errors("datajob show"):
        q = get_queue(queue or "default")
        st = jobs.status(q, validate_id(target, "job id"))
    if st.manifest is not None:
        stdout.write(json.dumps(st.manifest, indent=2) + "\n")
        return
    if st.spec is None:
        raise bad_input(f"no data job {target!r} in queue {q.name!r} (or its record has "
                           "expired: `datajob show OUTPUT_DIR` reads the manifest of a "
                           "finished one)")
    summary = {
        "job": st.job_id, "state": st.state, "chunks": st.chunks,
        "chunks_done": sorted(st.reports), "failures": st.failures,
        "spec": st.spec.to_dict(),
    }
    stdout.write(json.dumps(summary, indent=2) + "\n")


def cancel(job_id: str, *, queue: str | None = None, wait_s: float = jobs.CANCEL_WAIT_S,
           stdout: TextIO | None = None, actor: Actor | None = None) -> Result:
    """Cancel a data job (both its requests; audited as `manage.py cancel` is), wait up to
    `wait_s` for its running tasks to stop, then remove its staging data; say what became of
    it."""
    from core.cli.ops import ops_errors
    from core.ops import datajobs
    from core.ops.audit import os_actor

    stdout = stdout or sys.stdout
    with ops_errors("datajob cancel"):
        result = datajobs.cancel(actor or os_actor(), queue or "default", job_id, wait_s=wait_s)
    stdout.write(f"data job {job_id} cancelled\n" if result.acted else
                 f"data job {job_id}: nothing to cancel (finished or cancelled already)\n")
    for note in result.notes:
        stdout.write(note + "\n")
    return result


def clean(*, queue: str | None = None, dry_run: bool = False,
          stdout: TextIO | None = None, actor: Actor | None = None) -> list[jobs.Cleanup]:
    """Remove the staging data of the queue's cancelled or expired jobs that have no task
    running (never of a running, held, failed or done job); print each and the bytes. One
    audit entry (a dry run's too, saying so), with the OS user (or `actor`) as the actor."""
    from core.ops import audit, datajobs

    stdout = stdout or sys.stdout
    with command_errors("datajob clean"):
        q = get_queue(queue or "default")
        with _nothing_done(datajobs.CLEAN):
            done = datajobs.clean(actor or audit.os_actor(), q.name, dry_run=dry_run)
    removed = done.removed
    verb = "would remove" if dry_run else "removed"
    for c in removed:
        stdout.write(f"{verb} {c.staging} (data job {c.job_id}, {c.state}, "
                     f"{c.removed_bytes or 0:,} bytes)\n")
    total = sum(c.removed_bytes or 0 for c in removed)
    stdout.write(f"{verb} {len(removed)} staging director{'y' if len(removed) == 1 else 'ies'}"
                 f", {total:,} bytes, in queue {q.name}" + ("; nothing done" if dry_run else "")
                 + "\n")
    return removed

"""Data jobs as operations, one function each, for the console's Data jobs page and
`manage.py datajob`: submit a job (checked first by core.pipeline.submission, as both front
ends do), cancel it, and clean what cancelled jobs left. Each checks the actor's permission (a
refusal is audited, then raised as Refused), writes one audit entry, also when Redis fails
part-way, and returns what came of it for the front end to say: the job's id, whether it was
new, and why it may wait (its queue paused, no live worker of its handler, Spark warming up).
The scheduler is handed submit_slot, a schedule's run of a data job (no actor: unaudited)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from datetime import datetime

from core.conf import get_queue
from core.pipeline import jobs
from core.pipeline.spec import JobSpec, SpecError
from core.pipeline.unique_output import output_key
from core.queue import Queue, QueueError, read, spark_warming
from core.queue.errors import InvalidInput, UnknownHandlerWarning
from core.queue.keys import validate_id
from core.queue.models import RequestInfo
from core.queue.schedule.spec import Schedule

from . import actions, audit
from .actions import Result
from .audit import Actor
from .errors import BadInput, NotFound, Refused

SUBMIT = "datajob"  # the audit log's action of a submit
SUBMIT_PERMISSION = "core.submit_datajob"
CLEAN = "datajob-clean"
CLEAN_PERMISSION = "core.cancel_request"  # whoever may cancel a job may clean what it left


@dataclass(frozen=True)
class Submitted:
    """What a submit did, for a front end to say."""

    queue: str
    job_id: str
    created: bool  # False: a job of this id was submitted before; nothing changed
    audit_id: int
    no_worker: bool = False  # no live worker runs the data jobs' handler: it waits for one
    paused: bool = False  # (a new job) its queue is paused: it waits for a resume
    warming: str = ""  # (a new job) the stack's Spark warms up: it waits for that
    request: RequestInfo | None = None  # (a new job given a due time) its request now
    # (not created) job_id is another job's, which writes the same output and waits or runs
    same_output: bool = False


@dataclass(frozen=True)
class Cleaned:
    """What a clean removed (or, dry, would remove)."""

    queue: str
    removed: list[jobs.Cleanup]
    dry_run: bool
    audit_id: int


def require(actor: Actor, action: str, permission: str, queue: str, target: str) -> None:
    """Refused, and the refusal audited, unless `actor` holds `permission`: also for a front
    end that refuses before it reads what was sent."""
    if not audit.may(actor, permission):
        audit.record(actor, action, queue, target=target, count=1, refused=True,
                     error=f"{actor.name} lacks the permission {permission}")
        verb = {SUBMIT: "submit a data job", CLEAN: "clean data jobs' staging data"}.get(
            action, action)
        raise Refused(f"{actor.name} may not {verb}: it needs the permission {permission} "
                      "(the refusal was recorded)")


def submit(actor: Actor, queue: str, spec: JobSpec, options: jobs.QueueOptions | None = None,
           *, run_at: datetime | None = None, delay: float | None = None,
           unique_output: bool = True) -> Submitted:
    """Queue a checked job (core.pipeline.submission.job_spec), due at `run_at` or after
    `delay` if given. BadInput, with nothing written, if its id is another request's or its
    description does not fit in its tasks; a job submitted before changes nothing, nor does
    one whose output another job waiting or running writes (`unique_output`, the default:
    the result names that job, same_output)."""
    q = get_queue(queue)
    target = f"data job {spec.job_id}: {spec.input} -> {spec.output}"
    require(actor, SUBMIT, SUBMIT_PERMISSION, q.name, target)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnknownHandlerWarning)
        try:
            created = jobs.submit(q, spec, options, run_at=run_at, delay=delay,
                                  unique_output=unique_output)
        except SpecError as exc:  # the id is another request's: nothing was written
            raise BadInput(str(exc)) from exc
        except QueueError as exc:  # Redis away or refusing: the entry says so
            audit.record(actor, SUBMIT, q.name, target=target, count=1, error=str(exc))
            raise
    holder = None if created or not unique_output else _writing(q, spec)
    if holder is not None:
        target += f" (job {holder} writes that output: nothing submitted)"
    entry = audit.record(actor, SUBMIT, q.name, target=target[:2000], count=1,
                         acted=int(created), skipped=int(not created))
    no_worker = any(issubclass(w.category, UnknownHandlerWarning) for w in caught)
    if not created:
        return Submitted(q.name, holder or spec.job_id, False, entry.id, no_worker,
                         same_output=holder is not None)
    due = run_at is not None or delay is not None
    return Submitted(q.name, spec.job_id, True, entry.id, no_worker, paused=q.paused(),
                     warming=_warming(q),
                     request=read.request(q, spec.job_id) if due else None)


def _writing(q: Queue, spec: JobSpec) -> str | None:
    """The other job that holds the output's unique key (its chunk request or, once that is
    done, its combine step), or None: the job of this id existed itself."""
    holder = read.unique_holder(q, output_key(spec.output))
    if holder is None or holder in (spec.job_id, jobs.combine_id(spec.job_id)):
        return None
    return holder.removesuffix(".combine")


def submit_slot(q: Queue, schedule: Schedule, slot_ms: int, rid: str) -> bool:
    """The run of a data job schedule's slot as request `rid`, for the scheduler and a run
    now (core.queue.schedule.store.JobSubmit): its job after the checks of `datajob submit`
    (SpecError: nothing queued, the run's error), queued; False if it existed already."""
    from core.pipeline import submission

    spec = submission.scheduled_job(schedule.job_fields(slot_ms, rid))
    # Not unique on the output: the schedule notes `rid` as the slot's run, which must then
    # exist (a slot whose job still runs queues another, as before).
    return jobs.submit(q, spec, submission.scheduled_options(schedule.options),
                       unique_output=False)


def _warming(q: Queue) -> str:
    """"Spark is warming up (...)" while the stack's Spark runs its first job
    (core.queue.spark_warming), else "" (also when Redis cannot say)."""
    try:
        found = spark_warming.read_beside(q)
    except QueueError:
        return ""
    return found.describe() if found is not None else ""


def cancel(actor: Actor, queue: str, job_id: str, *,
           wait_s: float = jobs.CANCEL_WAIT_S) -> Result:
    """Cancel a data job: both its requests (actions.cancel: audited as a cancel), then, once
    its running tasks have stopped (waiting up to `wait_s`), its staging data removed; the
    Result's notes say what became of it. BadInput, with nothing done, if `job_id` names no
    data job of the queue."""
    q = get_queue(queue)
    try:
        validate_id(job_id, "job id")
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None
    if jobs.job_of(q, job_id) != job_id:
        raise NotFound(f"no data job {job_id!r} in queue {q.name!r} (or its record has "
                       "expired: `datajob clean` still removes its staging if it was "
                       "cancelled)")
    return actions.cancel(actor, q.name, [job_id], job_wait_s=wait_s)


def clean(actor: Actor, queue: str, *, dry_run: bool = False) -> Cleaned:
    """Remove the staging data of the queue's cancelled or expired jobs that have no task
    running (never of a running, held, failed or done job: core.pipeline.jobs.clean). One
    audit entry, a dry run's too (its target says so)."""
    q = get_queue(queue)
    what = f"staging of the cancelled or expired data jobs of queue {q.name}"
    target = f"dry run: {what}" if dry_run else what
    require(actor, CLEAN, CLEAN_PERMISSION, q.name, target)
    try:
        removed = jobs.clean(q, dry_run=dry_run)
    except QueueError as exc:
        audit.record(actor, CLEAN, q.name, target=target, count=0, error=str(exc))
        raise
    if removed:
        target += ": " + audit.describe_ids([c.job_id for c in removed])
    entry = audit.record(actor, CLEAN, q.name, target=target, count=len(removed),
                         acted=0 if dry_run else len(removed))
    return Cleaned(q.name, removed, dry_run, entry.id)

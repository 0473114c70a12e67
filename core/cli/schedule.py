"""`manage.py schedule add|list|show|pause|resume|remove|run-now|restore`: recurring schedules
at the command line, through the same service layer (permissions, audit) and the same validation
as the console."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

from core.conf import get_queue
from core.ops import audit
from core.ops import schedules as ops
from core.ops.audit import Actor, os_actor
from core.queue import handlers
from core.queue.read.schedules import Run, ScheduleState
from core.queue.schedule.spec import Schedule, parse_every, parse_time, slot_time

from . import bad_input
from .ops import ops_errors
from .submit import read_tasks


def build(
    name: str, *, queue: str | None = None, cron: str | None = None, every: str | None = None,
    tz: str = "UTC", handler: str | None = None, task_args: Sequence[str] = (),
    file: str | None = None, job: str | None = None, start: str | None = None,
    end: str | None = None, missed: str = "latest", missed_max: int = 100,
    overlap: str = "skip", description: str = "", options: dict[str, Any] | None = None,
) -> Schedule:
    """A Schedule from command-line options (validated; CommandError saying what is wrong)."""
    with ops_errors("schedule"):
        job_spec: dict[str, Any] | None = None
        if job is not None:
            try:
                job_spec = json.loads(job)
            except json.JSONDecodeError as exc:
                raise bad_input(f"--job is not JSON ({exc.msg} at column {exc.colno}): "
                                   "give a data job's spec as a JSON object") from exc
            if not isinstance(job_spec, dict):
                raise bad_input("--job must be a JSON object (a data job's spec)")
        tasks = [t for _, t in read_tasks(task_args, file)] if job is None else []
        return Schedule(
            name=name, queue=queue or "default", handler=handler, tasks=tasks,
            options={k: v for k, v in (options or {}).items() if v is not None}, job=job_spec,
            cron=cron, tz=tz, every_s=parse_every(every) if every is not None else None,
            start_ms=parse_time(start, tz) if start else None,
            end_ms=parse_time(end, tz) if end else None, missed=missed, missed_max=missed_max,
            overlap=overlap, description=description,
        ).validated()


def add(schedule: Schedule, *, out: TextIO, actor: Actor | None = None,
        update: bool = False) -> str:
    """Create the schedule (`update`: change an existing one); prints it and its next runs."""
    actor = actor or os_actor()
    with ops_errors("schedule add"):
        audit.require_log()
        change = ops.save(actor, schedule, mode="replace" if update else "create")
        state = ops.store(schedule.queue).require(schedule.name)
    out.write(f"{change.status} schedule {schedule.name} in queue {schedule.queue}: "
              f"{schedule.describe()}\n")
    _next_runs(state, ops.store(schedule.queue).now_ms(), out)
    offered = handlers.known(get_queue(schedule.queue))
    if schedule.handler and schedule.handler not in offered:  # allowed: workers may come later
        out.write(f"warning: no worker of queue {schedule.queue} runs handler "
                  f"{schedule.handler!r} now (its workers run: "
                  f"{', '.join(offered) or 'none announced yet'}); each run waits until one "
                  "does\n")
    return change.status


def _next_runs(state: ScheduleState, now_ms: int, out: TextIO, n: int = 5) -> None:
    s = state.schedule
    if state.paused:
        out.write("paused: no runs until resumed\n")
        return
    start = state.next_ms
    slots = ([start, *s.upcoming(start, n - 1)] if start is not None else [])
    out.write("next runs: " + (", ".join(slot_time(x, s.tz) for x in slots) or "none (ended)")
              + "\n")


def listing(*, queue: str | None, out: TextIO) -> list[ScheduleState]:
    with ops_errors("schedule list"):
        rows = ops.store(queue or "default").all()
    if not rows:
        out.write(f"no schedules in queue {queue or 'default'}\n")
        return rows
    width = max(len(r.name) for r in rows)
    for r in rows:
        s = r.schedule
        nxt = "paused" if r.paused else (slot_time(r.next_ms, s.tz) if r.next_ms else "ended")
        out.write(f"{r.name:<{width}}  {nxt:<22}  {s.describe()}  "
                  f"[fired {r.fired}, skipped {r.skipped}, errors {r.errors}]\n")
    return rows


def show(name: str, *, queue: str | None, out: TextIO, runs: int = 10) -> ScheduleState:
    with ops_errors("schedule show"):
        st = ops.store(queue or "default")
        state = st.require(name)
        last = st.runs(name, runs)
        outcomes = st.outcomes([r.request_id for r in last if r.request_id])
        now = st.now_ms()
    s = state.schedule
    out.write(f"schedule {s.name} (queue {s.queue}){' PAUSED' if state.paused else ''}\n")
    out.write(f"  when: {s.describe()}\n")
    what = (f"data job {json.dumps(s.job)}" if s.job is not None
            else f"handler {s.handler}, {len(s.tasks)} task(s) {json.dumps(s.tasks)[:200]}")
    out.write(f"  what: {what}\n")
    if s.options:
        out.write(f"  request options: {json.dumps(s.options)}\n")
    out.write(f"  policies: missed={s.missed}"
              f"{f' (at most {s.missed_max})' if s.missed == 'all' else ''}, "
              f"overlap={s.overlap}\n")
    out.write(f"  fired {state.fired}, skipped {state.skipped}, errors {state.errors}\n  ")
    _next_runs(state, now, out)
    out.write("last runs:\n" if last else "no runs yet\n")
    for r in last:
        out.write(f"  {describe_run(r, s.tz, outcomes)}\n")
    return state


def describe_run(r: Run, tz: str, outcomes: dict[str, str]) -> str:
    at = datetime.fromtimestamp(r.at_ms / 1000).astimezone().isoformat(timespec="seconds")
    slot = slot_time(r.slot_ms, tz) if r.slot_ms is not None and r.status != "run-now" else ""
    if r.status == "missed":
        return f"{at}  skipped {r.count} missed slot(s)"
    if r.status == "error":
        return f"{at}  error: {r.note}"
    if r.status == "overlap":
        return f"{at}  slot {slot} skipped: {r.note}"
    outcome = outcomes.get(r.request_id or "", "") or "expired"
    who = f" by {r.by}" if r.by else ""
    label = "run now" if r.status == "run-now" else f"slot {slot}"
    return f"{at}  {label}{who}: request {r.request_id} {outcome}"


def change(action: str, name: str, *, queue: str | None, out: TextIO,
           actor: Actor | None = None) -> Any:
    """pause, resume, remove or run-now one schedule; prints what happened."""
    actor = actor or os_actor()
    q = queue or "default"
    fn = {"pause": ops.pause, "resume": ops.resume, "remove": ops.remove,
          "run-now": ops.run_now}[action]
    with ops_errors(f"schedule {action}"):
        audit.require_log()
        result = fn(actor, q, name)
    if action == "run-now":
        out.write(f"{result}\n")
    elif result:
        past = {"pause": "paused", "resume": "resumed", "remove": "removed"}[action]
        out.write(f"{past} schedule {name} in queue {q}\n")
    else:
        already = {"pause": "was paused already", "resume": "was not paused",
                   "remove": "did not exist"}[action]
        out.write(f"schedule {name} {already}; nothing done\n")
    return result


def restore(*, queue: str | None, dry_run: bool, out: TextIO,
            actor: Actor | None = None) -> list[ops.Restored]:
    """Declare again, from the database, the schedules Redis lost (never one that exists)."""
    actor = actor or os_actor()
    with ops_errors("schedule restore"):
        audit.require_log()
        done = ops.restore(actor, queue=queue, dry_run=dry_run)
    where = f"queue {queue}" if queue else "any queue"
    if not done:
        out.write(f"nothing to restore: every schedule of {where} that the database knows "
                  "and no operator removed is in Redis\n")
        return done
    for r in done:
        paused = " (paused, as it was)" if r.paused else ""
        note = f": {r.note}" if r.note else ""
        out.write(f"{r.status} schedule {r.name} in queue {r.queue}{paused}{note}\n")
    if dry_run:
        out.write(f"dry run: {len(done)} schedule(s) would be restored; nothing done\n")
    return done

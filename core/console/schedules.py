"""The Schedules page's form and rows: a form's text fields to a Schedule (validated as the
CLI's are: Schedule.validated()), a schedule back to fields for editing, and each row's next
runs and last runs with their requests' outcomes; the schedules gone from Redis, from the
database mirror."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.models import ScheduleRecord
from core.queue import InvalidInput
from core.queue.read.schedules import Run, ScheduleState
from core.queue.schedule.spec import (
    InvalidSchedule,
    Schedule,
    format_every,
    parse_every,
    parse_time,
    slot_time,
    zone,
)
from core.queue.schedule.store import Schedules

FIELDS = ("name", "kind", "handler", "tasks", "job", "timing", "cron", "tz", "every", "start",
          "end", "missed", "missed_max", "overlap", "priority", "concurrency", "tenant",
          "max_attempts", "description")
INT_OPTIONS = ("priority", "concurrency", "max_attempts")
RUNS_SHOWN = 5
REMOVED_SHOWN = 20


def blank() -> dict[str, str]:
    return dict.fromkeys(FIELDS, "") | {"kind": "tasks", "timing": "cron", "tz": "UTC",
                                        "missed": "latest", "overlap": "skip",
                                        "missed_max": "100", "tasks": "{}"}


def _int(text: str, label: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise InvalidSchedule(f"{label} must be a whole number, got {text!r}") from None


def from_form(form: dict[str, str], queue: str) -> Schedule:
    """The schedule a form describes, validated; InvalidSchedule saying what is wrong."""
    tasks: list[Any] = []
    job = None
    if form.get("kind") == "datajob":
        try:
            job = json.loads(form.get("job") or "")
        except json.JSONDecodeError as exc:
            raise InvalidSchedule(f"the data job is not JSON ({exc.msg} at line {exc.lineno})"
                                  ) from None
        if not isinstance(job, dict):
            raise InvalidSchedule("the data job must be a JSON object (a data job's spec)")
    else:
        for number, line in enumerate((form.get("tasks") or "").splitlines(), 1):
            if line.strip():
                try:
                    tasks.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise InvalidSchedule(f"task payloads, line {number}: not JSON ({exc.msg})"
                                          ) from None
    tz = form.get("tz") or "UTC"
    zone(tz)
    options: dict[str, Any] = {k: _int(form[k], k.replace("_", " ")) for k in INT_OPTIONS
                               if form.get(k)}
    if form.get("tenant"):
        options["tenant"] = form["tenant"]
    cron = every = None
    if form.get("timing") == "every":
        every = parse_every(form.get("every") or "")
    else:
        cron = form.get("cron") or ""
        if not cron.strip():
            raise InvalidSchedule("give a cron expression, such as '30 2 * * *'")
    return Schedule(
        name=form.get("name", ""), queue=queue,
        handler=(form.get("handler") or None) if job is None else None, tasks=tasks,
        options=options, job=job, cron=cron, tz=tz, every_s=every,
        start_ms=parse_time(form["start"], tz) if form.get("start") else None,
        end_ms=parse_time(form["end"], tz) if form.get("end") else None,
        missed=form.get("missed") or "latest",
        missed_max=_int(form.get("missed_max") or "100", "missed max"),
        overlap=form.get("overlap") or "skip", description=form.get("description", ""),
    ).validated()


def to_form(s: Schedule) -> dict[str, str]:
    """A stored schedule as the form's fields, to edit it."""
    def local(ms: int | None) -> str:
        if ms is None:
            return ""
        return datetime.fromtimestamp(ms / 1000, zone(s.tz)).isoformat(timespec="minutes")

    return blank() | {
        "name": s.name, "kind": s.kind, "handler": s.handler or "",
        "tasks": "\n".join(json.dumps(t) for t in s.tasks),
        "job": json.dumps(s.job, indent=2) if s.job is not None else "",
        "timing": "every" if s.every_s is not None else "cron", "cron": s.cron or "",
        "tz": s.tz, "every": format_every(s.every_s) if s.every_s else "",
        "start": local(s.start_ms), "end": local(s.end_ms), "missed": s.missed,
        "missed_max": str(s.missed_max), "overlap": s.overlap,
        "description": s.description,
        **{k: str(s.options[k]) for k in (*INT_OPTIONS, "tenant") if k in s.options},
    }


@dataclass(frozen=True)
class RunRow:
    run: Run
    when: str
    slot: str
    outcome: str  # the request's state now, "expired" once gone, or the run's status


@dataclass(frozen=True)
class Row:
    state: ScheduleState
    words: str
    next_runs: list[str]
    runs: list[RunRow]


def rows(store: Schedules, states: list[ScheduleState]) -> list[Row]:
    """Each schedule with its next runs and last runs (their outcomes in one round trip)."""
    runs = {st.name: store.runs(st.name, RUNS_SHOWN) for st in states}
    rids = [r.request_id for rs in runs.values() for r in rs if r.request_id]
    outcomes = store.outcomes(rids)
    now = store.now_ms()
    out = []
    for st in states:
        s = st.schedule
        nxt: list[int] = []
        if not st.paused and st.next_ms is not None:
            nxt = [st.next_ms, *s.upcoming(max(st.next_ms, now), 4)]
        run_rows = [
            RunRow(r, slot_time(r.at_ms, s.tz),
                   slot_time(r.slot_ms, s.tz) if r.slot_ms and r.status != "run-now" else "",
                   (outcomes.get(r.request_id, "") or "expired") if r.request_id else r.status)
            for r in runs[st.name]
        ]
        out.append(Row(st, s.describe(), [slot_time(x, s.tz) for x in nxt], run_rows))
    return out


def preview(form: dict[str, str], queue: str, now_ms: int, n: int = 5) -> tuple[str, list[str]]:
    """The words and next `n` runs of a form's schedule (InvalidSchedule if it is not one)."""
    s = from_form(form, queue)
    return s.describe(), [slot_time(x, s.tz) for x in s.upcoming(now_ms, n)]


@dataclass(frozen=True)
class RemovedRow:
    row: ScheduleRecord
    words: str


def removed(queue: str, limit: int = REMOVED_SHOWN) -> list[RemovedRow]:
    """The queue's schedules gone from Redis, as the mirror last saw them, newest first."""
    out = []
    rows = ScheduleRecord.objects.filter(queue=queue, removed_at__isnull=False)
    for r in rows.order_by("-removed_at")[:limit]:
        try:
            words = Schedule(**{**r.definition, "queue": r.queue, "name": r.name}).describe()
        except (TypeError, ValueError, InvalidInput):  # a definition this version cannot read
            words = "?"
        out.append(RemovedRow(r, words))
    return out

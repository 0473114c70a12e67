"""`--in DELAY` / `--at TIME`: when a submitted request (or data job) is due, for `submit`
and `datajob submit`."""

from __future__ import annotations

from argparse import ArgumentParser
from dataclasses import dataclass
from datetime import UTC, datetime

from core.cli import bad_input
from core.queue import InvalidInput
from core.queue.due import parse_at, parse_delay


@dataclass(frozen=True)
class Due:
    """A submit's due time, as the engine takes it (at most one of the two is set)."""

    run_at: datetime | None = None
    delay: float | None = None


def add_due_options(parser: ArgumentParser) -> None:
    when = parser.add_mutually_exclusive_group()
    when.add_argument(
        "--in", dest="due_in", metavar="DELAY",
        help="run after DELAY, e.g. 30s, 10m, 1h30m, 2d: the request waits, scheduled, until then")
    when.add_argument(
        "--at", dest="due_at", metavar="TIME",
        help="run at TIME, ISO 8601 with an offset, e.g. 2026-12-01T02:00+01:00 (a time "
             "already past runs now, and says so)")


def due_from(due_in: str | None, due_at: str | None) -> Due:
    """The options' due time; CommandError saying what to write for a bad one."""
    if due_in is not None and due_at is not None:
        raise bad_input("give --in or --at, not both")
    try:
        if due_in is not None:
            return Due(delay=parse_delay(due_in))
        if due_at is not None:
            return Due(run_at=parse_at(due_at))
    except InvalidInput as exc:
        raise bad_input(f"--{'in' if due_in is not None else 'at'}: {exc}") from exc
    return Due()


def describe(state: str, due_ms: int, asked: Due) -> str | None:
    """A line for the person who asked for a due time: when it runs, or that it runs now."""
    if asked.run_at is None and asked.delay is None:
        return None
    if state == "scheduled" and due_ms:
        at = datetime.fromtimestamp(due_ms / 1000, UTC).isoformat(timespec="seconds")
        return f"scheduled: due at {at}"
    if asked.run_at is not None:
        return f"{asked.run_at.isoformat()} has passed: the request runs now"
    return None

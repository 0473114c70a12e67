"""Due times of delayed requests: `run_at=` / `delay=` as the engine takes them, and the text
forms a person types (`--in 10m`, `--at 2026-12-01T02:00+01:00`)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta

from .errors import InvalidInput

# A due time is written by Lua as digits only below 1e14 ms; a bound far below that keeps
# every sum the scripts make (now + delay) there too.
MAX_DELAY_S = 10 * 366 * 86_400  # ten years
_MAX_AT_MS = 10**13  # year 2286
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_UNITS = {"ms": 0.001, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86_400, "w": 604_800}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|sec|min|s|m|h|d|w)", re.IGNORECASE)


def delay_seconds(delay: object) -> float:
    """`delay` (seconds as int or float, or a timedelta) as seconds; InvalidInput if it is
    negative, not finite, too long, or not a number."""
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, int | float) and not isinstance(delay, bool):
        seconds = float(delay)
    else:
        raise InvalidInput(f"delay must be seconds (a number) or a timedelta, got {delay!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInput(f"delay must be zero or more seconds, got {delay!r}")
    if seconds > MAX_DELAY_S:
        raise InvalidInput(f"delay must be at most ten years ({MAX_DELAY_S} s), got {seconds:g} s")
    return seconds


def at_ms(run_at: object) -> int:
    """`run_at` (a timezone-aware datetime) as ms since the epoch; InvalidInput for a naive
    datetime (which zone would it be in?) or anything else."""
    if not isinstance(run_at, datetime):
        raise InvalidInput(f"run_at must be a timezone-aware datetime, got {run_at!r}")
    if run_at.tzinfo is None or run_at.utcoffset() is None:
        raise InvalidInput(
            f"run_at {run_at.isoformat()} has no time zone: give one (e.g. tzinfo=UTC or "
            "+01:00), so that it means the same instant on every host"
        )
    ms = (run_at - _EPOCH) // timedelta(milliseconds=1)  # exact, unlike timestamp() * 1000
    if ms >= _MAX_AT_MS:
        raise InvalidInput(f"run_at {run_at.isoformat()} is too far ahead")
    return ms


def due_spec(run_at: object = None, delay: object = None) -> str:
    """The submit script's due argument: "" (now), "+<ms>" (after a delay, on the engine's
    clock) or "<ms>" (at a time; one already past means now)."""
    if run_at is not None and delay is not None:
        raise InvalidInput("give run_at or delay, not both")
    if delay is not None:
        ms = round(delay_seconds(delay) * 1000)
        return f"+{ms}" if ms > 0 else ""
    if run_at is not None:
        return str(at_ms(run_at))
    return ""


def parse_delay(text: str) -> float:
    """Seconds from a duration as a person writes it: "10m", "90s", "1h30m", "2d", "250ms",
    or a bare number of seconds. InvalidInput saying what is accepted otherwise."""
    s = text.strip().lower().replace(" ", "")
    if s.startswith("-"):
        raise InvalidInput(f"a delay cannot be negative: {text!r}")
    try:
        return delay_seconds(float(s)) if s and re.fullmatch(r"\d+(\.\d+)?", s) else _units(s, text)
    except OverflowError as exc:
        raise InvalidInput(f"delay {text!r} is too long") from exc


def _units(s: str, text: str) -> float:
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2).lower()]
        pos = m.end()
    if not s or pos != len(s):
        raise InvalidInput(
            f"cannot read {text!r} as a delay: write a number with a unit, e.g. 30s, 10m, "
            "1h30m, 2d (units: ms, s, m, h, d, w)"
        )
    return delay_seconds(total)


def parse_at(text: str) -> datetime:
    """A time as ISO 8601 with its offset ("2026-12-01T02:00+01:00", "...Z"); InvalidInput if
    it is not one or has no offset (a time without a zone is ambiguous)."""
    s = text.strip()
    try:
        when = datetime.fromisoformat(s[:-1] + "+00:00" if s[-1:] in ("Z", "z") else s)
    except ValueError as exc:
        raise InvalidInput(
            f"cannot read {text!r} as a time: write ISO 8601 with an offset, e.g. "
            "2026-12-01T02:00+01:00 or 2026-12-01T01:00Z"
        ) from exc
    if when.tzinfo is None:
        raise InvalidInput(
            f"{text!r} has no offset: add one (e.g. +01:00, or Z for UTC), so that it names "
            "one instant"
        )
    at_ms(when)  # too far ahead: said here, at the option
    return when

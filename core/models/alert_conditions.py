"""The alert rules' vocabulary: each condition a rule may watch, what narrows it, what its
threshold means, and how thresholds and durations are written. Shared by the rules' services
(core.ops.alerts), their evaluation (core.alerts), the console's form and the command line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from core.queue.errors import QueueadminError

SCOPES = ("queue", "handler", "tenant", "job")
MAX_DURATION_S = 366 * 86_400
_DURATION = re.compile(r"([0-9]+)([smhdw])")  # ASCII digits: \d takes any script's
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


class BadTerm(QueueadminError, ValueError):
    """A duration, threshold or condition that is not one; the message says what to write."""


@dataclass(frozen=True)
class Condition:
    name: str
    what: str  # one line: the help, the page, the messages
    scopes: tuple[str, ...]  # what may narrow it (of SCOPES)
    threshold: str  # "", "duration", "count", "ratio", "duration-or-factor"
    default: float | None = None  # the threshold when a rule gives none
    default_factor: float | None = None  # duration-or-factor's default, as a factor
    event: bool = False  # occurrences (a fingerprint's letters), not a state that holds
    for_s: int = 0  # a rule's `for` when it gives none
    quiet_s: int = 300  # a rule's quiet period when it gives none


_Q = ("queue",)
CONDITIONS = {c.name: c for c in (
    Condition("new-fingerprint", "a dead letter of a kind (masked error fingerprint) not seen "
              "within the quiet period", ("queue", "handler", "tenant"), "", event=True,
              quiet_s=3600),
    Condition("dead-rate", "dead letters growing faster than THRESHOLD a minute",
              ("queue", "handler", "tenant"), "count", 10),
    Condition("waiting-age", "the oldest waiting work older than THRESHOLD", _Q, "duration",
              600),
    Condition("request-overdue", "a delayed request held past its due time by more than "
              "THRESHOLD", _Q, "duration", 60),
    Condition("no-live-worker", "more than THRESHOLD tasks wait for a handler that no live "
              "worker runs", ("queue", "handler"), "count", 0),
    Condition("worker-lost", "a worker stopped beating without stopping", _Q, ""),
    Condition("expired-leases", "more than THRESHOLD expired leases not reclaimed", _Q,
              "count", 0, for_s=30),
    Condition("schedule-late", "a recurring schedule's run late by more than THRESHOLD, or "
              "its last slot missed or in error", ("queue", "handler"), "duration", 60),
    Condition("datajob-failed", "a data job failed", ("queue", "tenant", "job"), ""),
    Condition("datajob-slow", "a data job running longer than THRESHOLD, or than THRESHOLD "
              "times its usual time (3x)", ("queue", "tenant", "job"), "duration-or-factor",
              default_factor=3.0),
    Condition("redis-down", "Redis does not answer", (), "", for_s=10),
    Condition("redis-memory", "Redis' memory over THRESHOLD of its maxmemory (0.9 or 90%)",
              (), "ratio", 0.9),
    Condition("redis-aof", "Redis reports a failed write of its append-only file or "
              "snapshot", (), ""),
    Condition("mirror-lag", "the database's history behind the queue by more than THRESHOLD",
              _Q, "duration", 60),
)}


def condition(name: str) -> Condition:
    c = CONDITIONS.get(str(name).strip())
    if c is None:
        raise BadTerm(f"no condition {str(name)[:60]!r}: one of {', '.join(CONDITIONS)}")
    return c


def parse_duration(text: str | int | float, what: str = "duration") -> int:
    """Seconds from `0`, `90`, `90s`, `10m`, `1h30m`, `2d`, `1w` (at most 366 days)."""
    raw = str(text).strip().replace(" ", "").lower()
    if raw.isascii() and raw.isdigit():  # "²".isdigit() is true, and int() refuses it
        seconds = int(raw)
    else:
        parts = _DURATION.findall(raw)
        if not parts or "".join(n + u for n, u in parts) != raw:
            raise BadTerm(f"{what} {str(text)[:40]!r} is not a duration: write seconds or "
                          "amounts with units s, m, h, d, w, such as 90s, 10m, 1h30m, 1d")
        seconds = sum(int(n) * _UNIT_S[u] for n, u in parts)
    if seconds > MAX_DURATION_S:
        raise BadTerm(f"{what} {str(text)[:40]!r} is over 366 days")
    return seconds


def format_duration(seconds: float | int | None) -> str:
    """`90s`, `10m`, `1h30m`: what parse_duration reads back."""
    if seconds is None:
        return ""
    left, out = int(seconds), []
    for unit in ("d", "h", "m", "s"):
        n, left = divmod(left, _UNIT_S[unit])
        if n:
            out.append(f"{n}{unit}")
    return "".join(out) or "0s"


def parse_threshold(c: Condition, text: str | None) -> tuple[float | None, float | None]:
    """(threshold, factor) of `text` for condition `c`; (None, None) when `text` is empty
    (the condition's default applies)."""
    if text is None or not str(text).strip():
        return None, None
    raw = str(text).strip().lower()
    if not c.threshold:
        raise BadTerm(f"{c.name} takes no threshold (it fires on {c.what})")
    if c.threshold == "duration-or-factor" and raw.endswith("x"):
        return None, _number(raw[:-1], f"{c.name}'s factor", low=1.0)
    if c.threshold in ("duration", "duration-or-factor"):
        return float(parse_duration(raw, f"{c.name}'s threshold")), None
    if c.threshold == "ratio":
        if raw.endswith("%"):
            return _number(raw[:-1], f"{c.name}'s threshold", high=100.0) / 100, None
        return _number(raw, f"{c.name}'s threshold", high=1.0), None
    return _number(raw, f"{c.name}'s threshold"), None


def _number(raw: str, what: str, *, low: float = 0.0, high: float = 1e12) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise BadTerm(f"{what} {raw[:40]!r} is not a number") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise BadTerm(f"{what} {raw[:40]!r} must be between {low:g} and {high:g}")
    return value


def describe_threshold(c: Condition, threshold: float | None, factor: float | None) -> str:
    """The threshold in force, as a person writes it ("10m", "3x", "90%", "10")."""
    if not c.threshold:
        return ""
    if factor is not None or (threshold is None and c.default_factor is not None):
        return f"{factor if factor is not None else c.default_factor:g}x"
    value = threshold if threshold is not None else c.default
    if value is None:
        return ""
    if c.threshold in ("duration", "duration-or-factor"):
        return format_duration(value)
    if c.threshold == "ratio":
        return f"{value * 100:g}%"
    return f"{value:g}"

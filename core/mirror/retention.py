"""Retention (issue 35): how long the database keeps each kind of history, per queue.

A kind's retention comes from, first to last: the queue's own setting (RetentionSetting, set
by an admin from the console or `manage.py retention set KIND DURATION --queue Q`), the
setting for every queue (the same without --queue), the environment (QA_RETAIN_<KIND>, read
by queueadmin/settings.py and parsed here, when used), the default below. The pruner
(core.mirror.retention_prune) removes what is older; `retention show` and the console's
Retention page say what holds and where it comes from.

A duration is a number and a unit, or several (30d, 12h, 90s, 15m, 2w, 1d12h), or
"forever": never pruned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from django.conf import settings

from core.models import RetentionSetting
from core.queue import QueueadminError

DAY = 86_400


@dataclass(frozen=True)
class Kind:
    name: str  # what `retention set` takes
    title: str  # what the pages call it
    default_s: int | None
    what: str  # what is removed, in words

    @property
    def variable(self) -> str:
        return "QA_RETAIN_" + self.name.upper().replace("-", "_")


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("requests", "requests", 30 * DAY,
         "finished requests (done, failed, cancelled) and their timelines, by when they "
         "finished"),
    Kind("dead", "dead letters", 30 * DAY,
         "dead letters an operator requeued or deleted, by when; a letter still dead stays"),
    Kind("search", "search documents", 30 * DAY,
         "the search box's words of each request, by when the request was created"),
    Kind("audit", "audit entries", 365 * DAY,
         "audit log entries, by when; written out as JSON lines first (QA_AUDIT_EXPORT)"),
    Kind("bulk", "bulk actions", 90 * DAY,
         "finished bulk actions (their snapshots of ids) and previews never confirmed"),
    Kind("datajobs", "data jobs", 90 * DAY,
         "data jobs' records in the database (spec, plan, reports), by when they finished"),
    # A day of minute detail, the oldest minute whole (the Handlers page's last day); hour
    # rows for its 90 days. The totals since metrics began are never pruned.
    Kind("handler-minutes", "handler minutes", 25 * 3600,
         "the handlers' per-minute metrics (the Handlers page's last hour and day)"),
    Kind("handler-hours", "handler hours", 90 * DAY,
         "the handlers' per-hour metrics (the Handlers page's 7 and 90 days)"),
)}

UNITS = {"s": 1, "m": 60, "h": 3600, "d": DAY, "w": 7 * DAY}
_PART = re.compile(r"(\d{1,9})([smhdw])")
LONGEST_S = 100 * 365 * DAY
FOREVER = "forever"


class BadRetention(QueueadminError, ValueError):
    """A kind or a duration that is not one; the message says what is."""


def parse_duration(text: str) -> int | None:
    """Seconds of a duration such as 30d, 12h, 90s or 1d12h; None for "forever"."""
    raw = str(text).strip().lower()
    if raw in (FOREVER, "never"):
        return None
    if not raw or len(raw) > 40 or _PART.sub("", raw):
        raise BadRetention(
            f"{str(text)[:40]!r} is not a duration: give a number and a unit (s, m, h, d, w), "
            "such as 30d, 12h or 90s (or several: 1d12h), or \"forever\"")
    seconds = sum(int(n) * UNITS[unit] for n, unit in _PART.findall(raw))
    if seconds < 1:
        raise BadRetention(f"{text!r} keeps nothing: a retention is at least 1s (or "
                           "\"forever\")")
    if seconds > LONGEST_S:
        raise BadRetention(f"{text!r} is over 100 years: give \"forever\" to never prune")
    return seconds


def format_duration(seconds: int | None) -> str:
    """What parse_duration reads back: the largest unit that divides it (90s, 36h, 30d), or
    "forever"."""
    if seconds is None:
        return FOREVER
    for unit in ("d", "h", "m"):  # weeks as days: 14d reads at once, 2w less so
        if seconds % UNITS[unit] == 0:
            return f"{seconds // UNITS[unit]}{unit}"
    return f"{seconds}s"


def kind_of(name: str) -> Kind:
    """The kind named `name`; BadRetention listing the kinds otherwise."""
    kind = KINDS.get(str(name).strip().lower())
    if kind is None:
        raise BadRetention(f"{str(name)[:40]!r} is not a kind of history: one of "
                           f"{', '.join(KINDS)}")
    return kind


@dataclass(frozen=True)
class Value:
    seconds: int | None
    source: str  # "default", "QA_RETAIN_REQUESTS", "set by alice" ...

    @property
    def text(self) -> str:
        return format_duration(self.seconds)


@dataclass(frozen=True)
class Policy:
    """Every kind's retention for every queue, as read once (a pass of the pruner, a page)."""

    defaults: dict[str, Value]  # kind -> for every queue without its own
    overrides: dict[str, dict[str, Value]] = field(default_factory=dict)  # kind -> queue ->

    def value(self, kind: str, queue: str) -> Value:
        return self.overrides.get(kind, {}).get(queue) or self.defaults[kind]

    def keep_s(self, kind: str, queue: str) -> int | None:
        """How long `queue` keeps `kind` (seconds; None: forever)."""
        return self.value(kind, queue).seconds

    def queues(self, kind: str) -> dict[str, Value]:
        """The queues with a retention of their own for `kind`."""
        return self.overrides.get(kind, {})


def from_settings(kind: Kind) -> Value:
    """The kind's retention from its QA_RETAIN_ variable, or the default; BadRetention naming
    the variable if its value is not a duration."""
    raw = str(getattr(settings, "RETENTION", {}).get(kind.name, "") or "").strip()
    if not raw:
        return Value(kind.default_s, "default")
    try:
        return Value(parse_duration(raw), kind.variable)
    except BadRetention as exc:
        raise BadRetention(f"{kind.variable}: {exc}") from None


def load() -> Policy:
    """The retention that holds now: the settings, then what admins set (one query)."""
    defaults = {name: from_settings(kind) for name, kind in KINDS.items()}
    overrides: dict[str, dict[str, Value]] = {}
    for row in RetentionSetting.objects.order_by("kind", "queue"):
        if row.kind not in KINDS:
            continue  # a kind a later version knows
        value = Value(row.seconds, f"set by {row.updated_by}" if row.updated_by else "set")
        if row.queue:
            overrides.setdefault(row.kind, {})[row.queue] = value
        else:
            defaults[row.kind] = value
    return Policy(defaults, overrides)

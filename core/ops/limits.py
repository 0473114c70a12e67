"""Limits on keys (issue 37), for the console's Limits page and `manage.py limit`: an admin
sets, changes or removes a queue's limit (a concurrency cap and/or a rate of starts on the
queue, a handler, a tenant, a payload field or a named resource); every console account reads
them with their use. Setting and removing check core.pause_queue (the admin group's: a limit
is flow control of the queue, as a pause is) and write one audit entry, a refusal or bad input
too. The engine applies a change at its next dequeue (core.queue.limits)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.conf import DEFAULT_QUEUE, get_queue, redis_client
from core.queue import InvalidInput, Queue, QueueError, read
from core.queue.keys import validate_id
from core.queue.limits import KINDS, MAX_WINDOW_MS
from core.queue.models import Limit, LimitUse
from core.queue.unique import duration_ms

from . import audit
from .actions import Result, check_permission
from .audit import as_actor
from .errors import BadInput

ON_HELP = "queue, handler=H, tenant=T, field=F or resource=R"
_RATE = re.compile(r"\s*(\d+)\s*/\s*(\S+)\s*")
_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))


@dataclass(frozen=True)
class QueueLimits:
    """A queue's limits with their use now."""

    queue: str
    limits: list[LimitUse]


def parse_on(text: str) -> tuple[str, str]:
    """"handler=H", "tenant=T", "field=F", "resource=R" or "queue" as (kind, value)."""
    kind, eq, value = str(text).strip().partition("=")
    kind = kind.strip().lower()
    if kind not in KINDS:
        raise BadInput(f"on {str(text)[:60]!r}: a limit is on {ON_HELP}")
    if kind == "queue":
        if eq and value.strip():
            raise BadInput("on queue names no value: the limit holds the whole queue it is "
                           "set in")
        return kind, ""
    if not value.strip():
        raise BadInput(f"on {kind}: name the {kind} (e.g. {kind}=billing)")
    return kind, value.strip()


def parse_rate(text: str) -> tuple[int, int]:
    """"100/1s", "5/m", "1000/1h", "10/500ms" as (starts, window ms); BadInput otherwise."""
    m = _RATE.fullmatch(str(text))
    if not m:
        raise BadInput(f"rate {str(text)[:40]!r}: say N/PERIOD, e.g. 100/1s, 600/1m or 5/s")
    n, period = int(m.group(1)), m.group(2)
    if period in ("ms", "s", "m", "h", "d"):
        period = "1" + period
    try:
        per_ms = duration_ms(period)
    except InvalidInput:
        raise BadInput(f"rate {text!r}: {period!r} is not a period (say 1s, 10s, 1m, 1h or "
                       "500ms)") from None
    if n < 1:
        raise BadInput(f"rate {text!r}: at least 1 start per period")
    if not 1 <= per_ms <= MAX_WINDOW_MS:
        raise BadInput(f"rate {text!r}: the period is 1ms to 1d")
    return n, per_ms


def period_text(ms: int) -> str:
    """A window as the rate's PERIOD: 1s, 10s, 1m, 1h, 500ms."""
    for unit, size in _UNITS:
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def describe(limit: Limit | None) -> str:
    """A limit in a line: "on handler=report: 100/1s, concurrency 5"."""
    if limit is None:
        return "none"
    on = limit.on if limit.on == "queue" else f"{limit.on}={limit.value}"
    caps = []
    if limit.rate is not None:
        caps.append(f"{limit.rate}/{period_text(limit.per_ms)}")
    if limit.concurrency is not None:
        caps.append(f"concurrency {limit.concurrency}")
    return f"on {on}: {', '.join(caps)}"


def _queue(name: str | None) -> Queue:
    try:
        return get_queue(validate_id(name, "queue name") if name else DEFAULT_QUEUE)
    except InvalidInput as exc:
        raise BadInput(str(exc)) from None


def _known_queues() -> list[str]:
    names = list(read.queues(redis_client(), prefix=settings.QUEUE_PREFIX))
    return sorted(set(names) | {DEFAULT_QUEUE})


def table(queue: str | None = None) -> list[QueueLimits]:
    """The limits of `queue` (or of every queue a producer or worker has used) with their use
    now; a queue without limits is left out unless named."""
    names = [_queue(queue).name] if queue else _known_queues()
    out = []
    for name in names:
        uses = read.limits(get_queue(name))
        if uses or queue:
            out.append(QueueLimits(name, uses))
    return out


def current(queue: str | None, name: str) -> Limit | None:
    """The limit `name` of `queue` as it is now, or None."""
    q = _queue(queue)
    return next((u.limit for u in read.limits(q) if u.limit.name == name), None)


def _unknown_queue(name: str) -> tuple[str, ...]:
    """A note when no producer or worker has used the queue (a typo?)."""
    try:
        if name in _known_queues():
            return ()
    except QueueError:
        return ()
    return (f"no producer or worker has used queue {name!r} yet: the limit holds once one "
            "does (check the name)",)


def set_limit(who: Any, name: str, on: str, *, rate: str | None = None,
              concurrency: int | str | None = None, queue: str | None = None) -> Result:
    """Create or change the limit `name` of `queue` (default: the default queue): on `on`
    ("handler=H", ..., or "queue"), at most `rate` starts ("N/PERIOD") and/or `concurrency`
    tasks leased at once. The next dequeue applies it."""
    actor = as_actor(who)
    qname = str(queue or DEFAULT_QUEUE)[:200]
    target = (f"limit {str(name)[:100]} on {str(on)[:200]}: rate {str(rate)[:40]}, "
              f"concurrency {str(concurrency)[:20]}")
    check_permission(actor, "limit-set", qname, target, 1)
    try:
        q = _queue(queue)
        lname = validate_id(str(name).strip(), "limit name")
        kind, value = parse_on(on)
        n: int | None = None
        per_ms = 1000
        if rate:
            n, per_ms = parse_rate(rate)
        conc = _concurrency(concurrency)
        if n is None and conc is None:
            raise BadInput(f"limit {lname}: give a rate (N/PERIOD), a concurrency (N tasks at "
                           "once), or both")
        before = current(q.name, lname)
        limit = q.set_limit(lname, on=kind, value=value, rate=n, per=per_ms / 1000,
                            concurrency=conc)
    except (BadInput, InvalidInput) as exc:
        audit.record(actor, "limit-set", qname, target=target, count=1, error=str(exc)[:500])
        raise BadInput(str(exc)) from None
    changed = before != limit
    entry = audit.record(actor, "limit-set", q.name, count=1, acted=int(changed),
                         skipped=int(not changed),
                         target=f"limit {lname}: {describe(before)} -> {describe(limit)}")
    if not changed:
        message = f"limit {lname} of queue {q.name} was {describe(limit)} already"
    elif before is None:
        message = f"limit {lname} of queue {q.name} set, {describe(limit)}; the next dequeue " \
                  "applies it"
    else:
        message = f"limit {lname} of queue {q.name} changed to {describe(limit)} (was " \
                  f"{describe(before)}); the next dequeue applies it"
    return Result("limit-set", int(changed), int(not changed), message, entry.id,
                  _unknown_queue(q.name))


def _concurrency(value: int | str | None) -> int | None:
    if value is None or value == "":
        return None
    try:
        n = int(str(value).strip())
    except ValueError:
        raise BadInput(f"concurrency {str(value)[:20]!r}: a whole number of tasks") from None
    if not 1 <= n <= 1_000_000:
        raise BadInput(f"concurrency {n}: 1 to 1,000,000 tasks at once")
    return n


def remove_limit(who: Any, name: str, *, queue: str | None = None) -> Result:
    """Remove the limit `name` of `queue` (and what it counted): its key is free at the next
    dequeue."""
    actor = as_actor(who)
    qname = str(queue or DEFAULT_QUEUE)[:200]
    target = f"limit {str(name)[:100]}"
    check_permission(actor, "limit-remove", qname, target, 1)
    try:
        q = _queue(queue)
        lname = validate_id(str(name).strip(), "limit name")
        before = current(q.name, lname)
        gone = q.remove_limit(lname)
    except (BadInput, InvalidInput) as exc:
        audit.record(actor, "limit-remove", qname, target=target, count=1, error=str(exc)[:500])
        raise BadInput(str(exc)) from None
    entry = audit.record(actor, "limit-remove", q.name, count=1, acted=int(gone),
                         skipped=int(not gone),
                         target=f"limit {lname}: {describe(before)} -> none")
    message = (f"limit {lname} of queue {q.name} removed (was {describe(before)})" if gone
               else f"queue {q.name} has no limit named {lname}: nothing changed")
    return Result("limit-remove", int(gone), int(not gone), message, entry.id)


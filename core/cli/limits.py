"""`manage.py limit set|show|remove`: a queue's limits on keys (issue 37), through the same
service layer as the console's Limits page (core.ops.limits: permission, one audit entry).
Bad input exits 2 with one line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from django.core.management.base import CommandError
from django.db import DatabaseError

from core.ops import limits as ops
from core.ops.audit import Actor, os_actor
from core.ops.limits import QueueLimits, period_text

from .ops import ops_errors as _ops_errors


@contextmanager
def ops_errors(action: str) -> Iterator[None]:
    """The service layer's refusals as CommandErrors, and an audit log that cannot be
    written (no database) as one too."""
    with _ops_errors(action):
        try:
            yield
        except DatabaseError as exc:
            raise CommandError(f"{action}: nothing done: the audit log cannot be written "
                               f"({exc}): run `manage.py migrate` (`make run` does), or set "
                               "DATABASE_URL to the console's database") from exc


def show(*, out: TextIO, queue: str | None = None, as_json: bool = False) -> list[QueueLimits]:
    """Print the limits of `queue` (or of every queue that has some) with their use now."""
    with ops_errors("limit show"):
        rows = ops.table(queue)
    if as_json:
        out.write(json.dumps({
            r.queue: [{"name": u.limit.name, "on": u.limit.on, "value": u.limit.value,
                       "rate": u.limit.rate, "per_ms": u.limit.per_ms,
                       "concurrency": u.limit.concurrency, "held": u.held,
                       "started": u.started} for u in r.limits]
            for r in rows}, indent=2) + "\n")
        return rows
    if not any(r.limits for r in rows):
        where = f"queue {queue}" if queue else "any queue"
        out.write(f"no limits in {where} (`manage.py limit set NAME --on ... --rate N/1s`)\n")
        return rows
    out.write(f"{'queue':<16} {'limit':<20} {'on':<24} {'concurrency':>15} {'rate':>17}\n")
    for r in rows:
        for u in r.limits:
            lim = u.limit
            on = lim.on if lim.on == "queue" else f"{lim.on}={lim.value}"
            per_value = lim.on == "field"
            conc = _use(u.held, lim.concurrency, per_value)
            rate = _use(u.started, lim.rate, per_value)
            if lim.rate is not None:
                rate += f" per {period_text(lim.per_ms)}"
            out.write(f"{r.queue:<16} {lim.name:<20} {on:<24} {conc:>15} {rate:>17}\n")
    return rows


def _use(used: int, cap: int | None, per_value: bool) -> str:
    """"3/4" (used of the cap); "each 4" for a field limit, which holds each value apart (its
    use per value is not read); "-" without that cap."""
    if cap is None:
        return "-"
    return f"each {cap}" if per_value else f"{used}/{cap}"


def set_limit(name: str, on: str, *, rate: str | None = None,
              concurrency: int | str | None = None,
              queue: str | None = None, out: TextIO, actor: Actor | None = None) -> int:
    """`limit set NAME --on ...`: create or change a limit. Returns 1 if it changed one."""
    with ops_errors("limit set"):
        result = ops.set_limit(actor or os_actor(), name, on, rate=rate,
                               concurrency=concurrency, queue=queue)
    out.write(result.message + "\n")
    for note in result.notes:
        out.write(f"note: {note}\n")
    return result.acted


def remove(name: str, *, queue: str | None = None, out: TextIO,
           actor: Actor | None = None) -> int:
    """`limit remove NAME`: 1 if there was such a limit, else 0 (nothing changed)."""
    with ops_errors("limit remove"):
        result = ops.remove_limit(actor or os_actor(), name, queue=queue)
    out.write(result.message + "\n")
    return result.acted

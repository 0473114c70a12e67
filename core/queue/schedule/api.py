"""Schedules defined in code: a deploy declares them, and declaring the same one again changes
nothing (idempotent upsert).

    from core.queue.schedule.api import declare, every, cron
    declare(queue, cron("nightly", "30 2 * * *", tz="Europe/Berlin",
                        handler="aggregate", tasks=[{"day": "yesterday"}]))
"""

from __future__ import annotations

from typing import Any

from core.queue import Queue

from .spec import Schedule, parse_every
from .store import Change, Schedules


def cron(name: str, expr: str, *, tz: str = "UTC", **fields: Any) -> Schedule:
    """A schedule firing at the slots of the cron expression `expr` in the zone `tz`."""
    return Schedule(name=name, cron=expr, tz=tz, **fields)


def every(name: str, interval: str | int, **fields: Any) -> Schedule:
    """A schedule firing every `interval` (`10m`, `1h30m`, or seconds)."""
    return Schedule(name=name, every_s=parse_every(interval), **fields)


def declare(queue: Queue, *schedules: Schedule) -> dict[str, Change]:
    """Create or update each schedule in `queue` (its `queue` field is set to the queue's);
    an unchanged one keeps its next slot and its runs. Validates all before storing any."""
    from dataclasses import replace

    checked = [replace(s, queue=queue.name).validated() for s in schedules]
    store = Schedules(queue)
    return {s.name: store.upsert(s) for s in checked}

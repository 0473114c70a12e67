"""`manage.py queuestat`: depths, requests per state, live workers and totals of queues."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from django.conf import settings

from core.cli import command_errors
from core.conf import DEFAULT_QUEUE, get_queue, redis_client
from core.queue import read
from core.queue.models import STATES
from core.queue.read import QueueStats

if TYPE_CHECKING:
    from rich.table import Table

# Cumulative counters kept by the engine, in the order worth reading them.
TOTALS = ("submitted", "done", "retried", "failed")


def collect(queues: Sequence[str] = ()) -> list[QueueStats]:
    """Stats of each named queue in the order given; with none, of every queue in the
    registry (by name), or of the default queue while the registry is empty."""
    with command_errors("queuestat"):
        names = list(dict.fromkeys(queues)) or all_queues()
        stats = [read.stats(get_queue(name)) for name in names]  # a bad name: CommandError
        if not queues:  # the registry's own queues
            return stats
        known = read.queues(redis_client(), prefix=settings.QUEUE_PREFIX)
        unknown = [n for n in names if n != DEFAULT_QUEUE and n not in known]
        if unknown:  # its zeros would read as a healthy empty queue (a typo, say)
            sys.stderr.write(
                f"queuestat: no producer or worker has used {', '.join(map(repr, unknown))} "
                f"yet: its figures are all zero (the queues: {', '.join(known) or 'none'})\n")
        return stats


def all_queues() -> list[str]:
    """Every registered queue under settings.QUEUE_PREFIX; the default queue if none is."""
    return read.queues(redis_client(), prefix=settings.QUEUE_PREFIX) or [DEFAULT_QUEUE]


def queuestat(
    queues: Sequence[str] = (), *, as_json: bool = False, stdout: TextIO | None = None
) -> list[QueueStats]:
    """Print the stats of `queues` as a table (or JSON) on `stdout`, and return them."""
    stdout = stdout or sys.stdout
    stats = collect(queues)
    if as_json:
        stdout.write(json.dumps({"queues": [s.as_dict() for s in stats]}, indent=2) + "\n")
    else:
        from rich.console import Console  # not for --json

        Console(file=stdout).print(table(stats))
    return stats


def table(stats: Sequence[QueueStats]) -> Table:
    """One column per queue, one row per measure."""
    from rich.table import Table

    t = Table(title="queue stats", title_justify="left")
    t.add_column("")
    for s in stats:
        t.add_column(s.queue, justify="right")

    def row(label: str, values: Sequence[object], *, end_section: bool = False) -> None:
        t.add_row(label, *(str(v) for v in values), end_section=end_section)

    row("waiting", [s.waiting for s in stats])
    priorities = sorted({p for s in stats for p in s.waiting_by_priority}, reverse=True)
    for p in priorities:
        row(f"  priority {p}", [s.waiting_by_priority.get(p, 0) for s in stats])
    # Waiting for a handler no live worker runs: no other worker takes them (issue 33).
    for h in sorted({h for s in stats for h in s.unrunnable}):
        row(f"  no live worker runs {h}", [s.unrunnable.get(h, 0) for s in stats])
    row("leased", [s.leased for s in stats])
    row("delayed", [s.delayed for s in stats])
    row("dead letters", [s.dead for s in stats])
    row("live workers", [s.workers for s in stats], end_section=True)
    for state in STATES:
        row(f"requests {state}", [s.requests_by_state.get(state, 0) for s in stats])
    t.rows[-1].end_section = True
    names = [n for n in TOTALS if any(n in s.totals for s in stats)]
    names += sorted({n for s in stats for n in s.totals} - set(TOTALS))
    for name in names:
        row(f"total {name}", [s.totals.get(name, 0) for s in stats])
    return t

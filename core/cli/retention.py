"""`manage.py retention show|set|unset` and `manage.py prune`: how long the database keeps each
kind of history, and a pass of the pruner now, through the same service layer as the console
(core.ops.retention: permission, one audit entry). Bad input exits 2 with one line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from django.core.management.base import CommandError
from django.db import DatabaseError

from core.mirror.retention_prune import Report
from core.ops import retention as ops
from core.ops.audit import Actor, os_actor
from core.ops.retention import Row

from .ops import ops_errors


@contextmanager
def _errors(action: str) -> Iterator[None]:
    with ops_errors(action):
        try:
            yield
        except DatabaseError as exc:
            raise CommandError(f"{action}: the database cannot be read ({exc}): run `manage.py "
                               "migrate` (`make run` does), or set DATABASE_URL to the "
                               "console's database") from exc


def show(*, out: TextIO, as_json: bool = False) -> list[Row]:
    """Print every kind's retention, where it comes from, the queues with their own, and the
    pruner's last pass."""
    with _errors("retention show"):
        rows, runs = ops.table()
    if as_json:
        out.write(json.dumps({
            "kinds": {r.kind.name: {"every_queue": r.every.text, "seconds": r.every.seconds,
                                    "source": r.every.source,
                                    "queues": {q: {"keep": v.text, "seconds": v.seconds,
                                                   "source": v.source}
                                               for q, v in r.queues.items()}}
                      for r in rows},
            "last_prune": _run_json(runs[0]) if runs else None,
        }, indent=2) + "\n")
        return rows
    out.write(f"{'kind':<16} {'keep':>8}  {'from':<24} queues of their own\n")
    for r in rows:
        own = ", ".join(f"{q} {v.text}" for q, v in r.queues.items()) or "-"
        out.write(f"{r.kind.name:<16} {r.every.text:>8}  {r.every.source[:24]:<24} {own}\n")
    if runs:
        run = runs[0]
        out.write(f"last prune: {run.started_at:%Y-%m-%d %H:%M:%S} UTC ({run.source}): "
                  f"{run.total:,} rows in {run.seconds:.2f} s, {run.batches:,} "
                  f"batches, longest {run.longest_ms:.1f} ms"
                  f"{'; errors: ' + run.error if run.error else ''}\n")
    else:
        out.write("last prune: none yet (the services process prunes every QA_PRUNE_EVERY_S; "
                  "`manage.py prune` now)\n")
    return rows


def _run_json(run: Any) -> dict[str, Any]:
    return {"started_at": run.started_at.isoformat(), "source": run.source,
            "seconds": run.seconds, "removed": run.removed, "batches": run.batches,
            "longest_ms": run.longest_ms, "longest_at": run.longest_at, "error": run.error}


def change(action: str, kind: str, duration: str | None = None, *, queue: str | None = None,
           out: TextIO, actor: Actor | None = None) -> int:
    """`retention set KIND DURATION` or `retention unset KIND` (`--queue Q`: that queue's own).
    Returns 1 if it changed something, else 0."""
    actor = actor or os_actor()
    with _errors(f"retention {action}"):
        if action == "set":
            result = ops.set_retention(actor, kind, str(duration), queue=queue)
        else:
            result = ops.unset_retention(actor, kind, queue=queue)
    out.write(result.message + "\n")
    for note in result.notes:
        out.write(f"note: {note}\n")
    return result.acted


def prune(*, out: TextIO, export_audit: str | None = None, actor: Actor | None = None,
          as_json: bool = False) -> Report:
    """One pass of the pruner now; prints what it removed. CommandError (exit 1) if a kind
    could not be pruned (the others were)."""
    actor = actor or os_actor()
    with _errors("prune"):
        report = ops.prune_now(actor, export_audit=export_audit)
    if as_json:
        out.write(json.dumps({
            "removed": report.removed, "seconds": round(report.seconds, 3),
            "batches": report.batches, "longest_ms": round(report.longest_ms, 2),
            "longest_at": report.longest_at, "audit_exported": report.exported,
            "audit_export": report.export_to, "notes": report.notes, "errors": report.errors,
        }, indent=2) + "\n")
    else:
        _print_report(report, out)
    if report.errors:
        raise CommandError("prune: " + "; ".join(report.errors))
    return report


def _print_report(report: Report, out: TextIO) -> None:
    out.write(f"pruned {report.total:,} rows in {report.seconds:.2f} s ({report.batches:,} "
              f"batches; the longest held its locks {report.longest_ms:.1f} ms"
              f"{': ' + report.longest_at if report.longest_at else ''})\n")
    for kind, n in report.removed.items():
        if kind == "request-events":
            continue
        extra = ""
        if kind == "requests":
            extra = f"  (and {report.removed.get('request-events', 0):,} of their events)"
        out.write(f"  {kind:<16} {n:>12,}{extra}\n")
    for note in report.notes:
        out.write(f"  {note}\n")
    if report.exported:
        out.write(f"audit entries written out first: {report.exported:,} "
                  f"({report.export_to})\n")

"""The pruner (issue 35): removes what each kind's retention (core.mirror.retention) no longer
keeps, run by the services process every QA_PRUNE_EVERY_S and by `manage.py prune`.

How it stays out of the way of the mirror and the console:

- **Keyset batches.** A pass walks a table by its time column, queue by queue where an index
  leads with (queue, time): one read takes the time of the batch's last row (the newest of the
  oldest `size` rows past the previous batch, an index range), then one transaction deletes the
  rows between the previous batch's last time and this one's. Never OFFSET, never a row loaded
  into Python (but the audit entries written out first), never an ORM delete.
- **Short locks.** Every batch is its own transaction; its size follows what the last took
  (halved over TARGET_MS, doubled under a third of it, between BATCH_MIN and BATCH_MAX), so a
  batch holds its locks well under 100 ms. The longest is measured (on SQLite from when the
  database's write lock is held, not from when it was asked for) and reported: `prune` prints
  it, PruneRun keeps it, the Retention page and bench/bench_retention.py show it. On SQLite the
  pruner then waits as long as the batch took, so the mirror writes between its batches.
- **What a row takes with it.** A finished request's timeline (RequestEvent) goes in the same
  transaction (one statement on PostgreSQL); rows that point at a pruned row by a foreign key
  go as Django's on_delete says (CASCADE: deleted first; SET_NULL: set to NULL), in SQL.
- **What it never removes.** Unfinished requests, dead letters still dead, running bulk
  actions, the handlers' minutes and hours the mirror may still add to (at or after its
  metrics cursor), and the totals (HandlerTotal, the engine's counters in Redis) that the
  overview's "since the queue began", the Handlers page and /metrics read.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, connection, models, transaction
from django.db.models.deletion import CASCADE, SET_NULL
from django.utils import timezone

from core.models import (
    AuditEntry,
    BulkAction,
    DeadLetter,
    HandlerHour,
    HandlerMinute,
    MetricsCursor,
    PruneRun,
    Request,
    RequestEvent,
    SearchDoc,
)

from . import retention
from .retention_export import AuditExport

log = logging.getLogger("queueadmin.pruner")

BATCH_FIRST, BATCH_MIN, BATCH_MAX = 500, 50, 5000
TARGET_MS = 40.0  # a batch's aim; the ceiling the issue sets is 100 ms
PRUNE_RUNS_KEPT = dt.timedelta(days=7)
FINISHED = ("done", "failed", "cancelled")
Key = tuple[Any, Any]  # a row's (time, id), as the database compares them


@dataclass(frozen=True)
class Target:
    """A kind's table and how its rows age."""

    kind: str
    model: type[models.Model]
    time: str  # the column (or SQL expression of columns) a row ages by
    where: str = ""  # what else a prunable row is (SQL, no parameter)
    per_queue: bool = True  # an index leads with (queue, time): pruned queue by queue

    @property
    def table(self) -> str:
        return str(connection.ops.quote_name(self.model._meta.db_table))

    @property
    def pk(self) -> str:
        return str(connection.ops.quote_name(self.model._meta.pk.column))


def targets() -> dict[str, Target | None]:
    """Every kind's table; None for a kind whose table this version has not got."""
    q = connection.ops.quote_name
    return {
        "requests": Target("requests", Request, q("finished_at"),
                           f"{q('state')} IN ('done', 'failed', 'cancelled')"),
        "dead": Target("dead", DeadLetter, q("resolved_at"), f"NOT ({q('resolution')} = '')"),
        "search": Target("search", SearchDoc, q("created_at")),
        "audit": Target("audit", AuditEntry, q("at"), per_queue=False),
        "bulk": Target("bulk", BulkAction, f"COALESCE({q('finished_at')}, {q('created_at')})",
                       f"{q('status')} IN ('stopped', 'done', 'failed', 'previewed')",
                       per_queue=False),
        "datajobs": _datajobs_target(),
        "handler-minutes": Target("handler-minutes", HandlerMinute, q("minute")),
        "handler-hours": Target("handler-hours", HandlerHour, q("hour")),
    }


def _datajobs_target() -> Target | None:
    """The data jobs' table (core/models/datajobs.py, issue 35 item 4), aged by when a job
    finished: pruned once a model with `queue` and `finished_at` is there."""
    from django.apps import apps

    for name in ("DataJob", "DataJobRecord", "Job"):
        try:
            model = apps.get_model("core", name)
        except LookupError:
            continue
        fields = {f.name for f in model._meta.concrete_fields}
        if {"queue", "finished_at"} <= fields:
            q = connection.ops.quote_name
            return Target("datajobs", model, q("finished_at"))
    return None


@dataclass
class Report:
    """What one pass removed (rows by kind; "request-events": the finished requests'
    timelines), and its longest batch."""

    removed: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    longest_ms: float = 0.0
    longest_at: str = ""
    seconds: float = 0.0
    exported: int = 0
    export_to: str = ""
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        """Rows removed, a finished request's events not counted apart."""
        return sum(n for k, n in self.removed.items() if k != "request-events")

    def add(self, kind: str, n: int) -> None:
        self.removed[kind] = self.removed.get(kind, 0) + n


@dataclass(frozen=True)
class Pass:
    label: str  # "requests of queue default"
    queue_sql: str  # "queue = %s", "queue NOT IN (...)", or "1 = 1"
    queue_params: tuple[str, ...]
    cutoff: dt.datetime  # rows older than this go


def prune(*, now: dt.datetime | None = None, policy: retention.Policy | None = None,
          export_audit: str | None = None, stop: threading.Event | None = None,
          kinds: Sequence[str] | None = None) -> Report:
    """One pass over every kind (or `kinds`): remove what its retention no longer keeps.
    `export_audit`: the file the audit entries go to first (default: QA_AUDIT_EXPORT's
    monthly files). A kind whose database fails is reported in `errors`; the others go on."""
    started = time.perf_counter()
    now = now or timezone.now()
    policy = policy or retention.load()
    report = Report()
    batches = Batches(report, stop or threading.Event())
    export = AuditExport(export_audit)
    report.export_to = export.describe()
    for kind, target in targets().items():
        if kinds is not None and kind not in kinds:
            continue
        if target is None:
            report.notes.append(f"{kind}: not in this database yet (nothing to prune)")
            continue
        report.add(kind, 0)
        try:
            for p in passes(target, policy, now):
                if batches.stopped:
                    break
                batches.run(target, p, export if kind == "audit" else None)
        except (DatabaseError, OSError) as exc:
            report.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
            log.warning("pruning %s stopped: %s", kind, exc)
    report.exported = export.written
    report.seconds = time.perf_counter() - started
    return report


def passes(target: Target, policy: retention.Policy, now: dt.datetime) -> list[Pass]:
    """The ranges of one kind to prune: queue by queue (each with its own retention) where an
    index leads with the queue, else the queues with their own retention, then the rest."""
    kind, out = target.kind, []
    if target.per_queue:
        for queue in queues_in(target.model):
            keep = policy.keep_s(kind, queue)
            if keep is None:
                continue
            cutoff = _held_back(kind, queue, now - dt.timedelta(seconds=keep))
            out.append(Pass(f"{kind} of queue {queue}", "queue = %s", (queue,), cutoff))
        return out
    own = policy.queues(kind)
    for queue, value in own.items():
        if value.seconds is not None:
            out.append(Pass(f"{kind} of queue {queue}", "queue = %s", (queue,),
                            now - dt.timedelta(seconds=value.seconds)))
    default = policy.defaults[kind].seconds
    if default is not None:
        if own:
            marks = ", ".join(["%s"] * len(own))
            out.append(Pass(f"{kind} of every other queue", f"queue NOT IN ({marks})",
                            tuple(own), now - dt.timedelta(seconds=default)))
        else:
            out.append(Pass(kind, "1 = 1", (), now - dt.timedelta(seconds=default)))
    return out


def _held_back(kind: str, queue: str, cutoff: dt.datetime) -> dt.datetime:
    """A handler metric row the mirror may still add to stays, whatever the retention: the
    minutes from its metrics cursor on (read again at the next roll: a pruned one would be
    counted twice into the hours and totals), and their hour."""
    if kind not in ("handler-minutes", "handler-hours"):
        return cutoff
    minute = MetricsCursor.objects.filter(queue=queue).values_list("minute", flat=True).first()
    if minute is None:
        return cutoff
    rolling = dt.datetime.fromtimestamp(int(minute) * 60, dt.UTC)
    if kind == "handler-hours":
        rolling = rolling.replace(minute=0)
    return min(cutoff, rolling)


def queues_in(model: type[models.Model]) -> list[str]:
    """The queues a table has rows of, one index probe each (a loose index scan: no DISTINCT
    over the table)."""
    table = connection.ops.quote_name(model._meta.db_table)
    out: list[str] = []
    with connection.cursor() as cur:
        while True:
            if out:
                cur.execute(f"SELECT MIN(queue) FROM {table} WHERE queue > %s", [out[-1]])
            else:
                cur.execute(f"SELECT MIN(queue) FROM {table}")
            row = cur.fetchone()
            if row is None or row[0] is None:
                return out
            out.append(str(row[0]))


class Batches:
    """Runs the passes' batches: their size, their timing, the report's counts."""

    def __init__(self, report: Report, stop: threading.Event) -> None:
        self.report = report
        self.stop = stop
        self.size = BATCH_FIRST
        self.sqlite = connection.vendor == "sqlite"

    @property
    def stopped(self) -> bool:
        return self.stop.is_set()

    def run(self, target: Target, p: Pass, export: AuditExport | None) -> None:
        """Prune one range, batch by batch, until nothing of it is left (or a stop)."""
        lo: Key | None = None
        cutoff = _db_time(p.cutoff)
        while not self.stopped:
            hi = self._last_of_batch(target, p, lo, cutoff)
            if hi is None:
                return
            where, params = _range(target, p, lo, hi)
            if export is not None and export.on:
                export.write(*_rows(target, where, params))
            held_ms = self._delete(target, where, params)
            self._timed(held_ms, p.label)
            lo = hi

    def _last_of_batch(self, target: Target, p: Pass, lo: Key | None,
                       cutoff: Any) -> Key | None:
        """The key (time, id) of the last row of the next batch: the `size`-th oldest after
        `lo` (None: nothing left to prune). Rows of one time are told apart by their id, so a
        batch stays `size` rows however many share a time."""
        conds = [p.queue_sql, f"{target.time} < %s"]
        params: list[Any] = [*p.queue_params, cutoff]
        if lo is not None:
            after, more = _after(target, lo)
            conds.append(after)
            params += more
        if target.where:
            conds.append(target.where)
        sql = (f"SELECT t, pk FROM (SELECT {target.time} AS t, {target.pk} AS pk "
               f"FROM {target.table} WHERE {' AND '.join(conds)} "
               f"ORDER BY {target.time}, {target.pk} LIMIT %s) batch "
               "ORDER BY t DESC, pk DESC LIMIT 1")
        with connection.cursor() as cur:
            cur.execute(sql, [*params, self.size])
            row = cur.fetchone()
        return None if row is None else (row[0], row[1])

    def _delete(self, target: Target, where: str, params: list[Any]) -> float:
        """Delete one batch in its own transaction; the milliseconds its locks were held."""
        with transaction.atomic():
            with connection.cursor() as cur:
                if self.sqlite:
                    # Take the database's write lock first (a write that changes nothing), so
                    # that the time measured is the time it is held, not the wait for it.
                    runs = connection.ops.quote_name(PruneRun._meta.db_table)
                    cur.execute(f"DELETE FROM {runs} WHERE id < 0")
                began = time.perf_counter()
                if target.kind == "requests":
                    n, events = _delete_requests(cur, target, where, params, self.sqlite)
                    self.report.add("request-events", events)
                else:
                    _dependents(cur, target.model, target.table, where, params)
                    cur.execute(f"DELETE FROM {target.table} WHERE {where}", params)
                    n = max(cur.rowcount, 0)
            self.report.add(target.kind, n)
        held_ms = (time.perf_counter() - began) * 1000
        if self.sqlite:
            self.stop.wait(held_ms / 1000)  # the mirror's turn at the write lock
        return held_ms

    def _timed(self, ms: float, label: str) -> None:
        r = self.report
        r.batches += 1
        if ms > r.longest_ms:
            r.longest_ms, r.longest_at = ms, f"{label} ({self.size} rows a batch)"
        if ms > TARGET_MS:
            self.size = max(BATCH_MIN, self.size // 2)
        elif ms < TARGET_MS / 3:
            self.size = min(BATCH_MAX, self.size * 2)


def _after(target: Target, lo: Key) -> tuple[str, list[Any]]:
    """Rows after the key `lo`: (time, id) > lo, written so that the time's index serves."""
    t, pk = target.time, target.pk
    return f"{t} >= %s AND ({t} > %s OR {pk} > %s)", [lo[0], lo[0], lo[1]]


def _range(target: Target, p: Pass, lo: Key | None, hi: Key) -> tuple[str, list[Any]]:
    """The predicate of one batch: its queue(s), after the last batch's key, up to `hi`."""
    t, pk = target.time, target.pk
    conds = [p.queue_sql, f"{t} <= %s AND ({t} < %s OR {pk} <= %s)"]
    params: list[Any] = [*p.queue_params, hi[0], hi[0], hi[1]]
    if lo is not None:
        after, more = _after(target, lo)
        conds.append(after)
        params += more
    if target.where:
        conds.append(target.where)
    return " AND ".join(conds), params


def _delete_requests(cur: Any, target: Target, where: str, params: list[Any],
                     sqlite: bool) -> tuple[int, int]:
    """Delete a batch of finished requests and their timelines: (requests, events)."""
    events = connection.ops.quote_name(RequestEvent._meta.db_table)
    if sqlite:
        # The write lock is held: both statements see the same requests.
        cur.execute(f"DELETE FROM {events} WHERE queue = %s AND request_id IN "
                    f"(SELECT request_id FROM {target.table} WHERE {where})",
                    [params[0], *params])
        gone_events = max(cur.rowcount, 0)
        cur.execute(f"DELETE FROM {target.table} WHERE {where}", params)
        return max(cur.rowcount, 0), gone_events
    # One statement: the requests deleted are exactly those whose events go.
    cur.execute(
        f"WITH gone AS (DELETE FROM {target.table} WHERE {where} RETURNING request_id), "
        f"ev AS (DELETE FROM {events} WHERE queue = %s AND request_id IN "
        f"(SELECT request_id FROM gone) RETURNING 1) "
        f"SELECT (SELECT COUNT(*) FROM gone), (SELECT COUNT(*) FROM ev)",
        [*params, params[0]])
    gone, ev = cur.fetchone()
    return int(gone), int(ev)


def _dependents(cur: Any, model: type[models.Model], table: str, where: str,
                params: list[Any]) -> None:
    """What points at the rows about to go by a foreign key, handled in SQL as the field's
    on_delete says: CASCADE rows deleted first (and theirs), SET_NULL set to NULL."""
    q = connection.ops.quote_name
    pk = q(model._meta.pk.column)
    for rel in model._meta.related_objects:
        if not isinstance(rel, models.ManyToOneRel):
            raise DatabaseError(f"{rel.related_model.__name__} holds {model.__name__} rows "
                                "in a many-to-many table: they cannot be pruned in SQL")
        fk = rel.field
        child, column = q(fk.model._meta.db_table), q(fk.column)
        inner = f"SELECT {pk} FROM {table} WHERE {where}"
        if fk.remote_field.on_delete is CASCADE:
            child_where = f"{column} IN ({inner})"
            _dependents(cur, fk.model, child, child_where, params)
            cur.execute(f"DELETE FROM {child} WHERE {child_where}", params)
        elif fk.remote_field.on_delete is SET_NULL:
            cur.execute(f"UPDATE {child} SET {column} = NULL WHERE {column} IN ({inner})",
                        params)
        else:
            raise DatabaseError(f"{fk.model.__name__}.{fk.name} protects the rows of "
                                f"{model.__name__}: they cannot be pruned")


def _rows(target: Target, where: str, params: list[Any]) -> tuple[list[str], list[Any]]:
    """The rows of one batch, every column (the audit entries written out before they go)."""
    columns = [f.column for f in target.model._meta.concrete_fields]
    q = connection.ops.quote_name
    with connection.cursor() as cur:
        cur.execute(f"SELECT {', '.join(q(c) for c in columns)} FROM {target.table} "
                    f"WHERE {where} ORDER BY {q('id')}", params)
        return columns, list(cur.fetchall())


def _db_time(value: dt.datetime) -> Any:
    """A time as the database compares it with its own columns."""
    return connection.ops.adapt_datetimefield_value(value)


def record(report: Report, *, started: dt.datetime, source: str) -> PruneRun:
    """Keep a pass's report (the Retention page shows the last ones), and forget those older
    than PRUNE_RUNS_KEPT."""
    PruneRun.objects.filter(started_at__lt=started - PRUNE_RUNS_KEPT).delete()
    run: PruneRun = PruneRun.objects.create(
        started_at=started, seconds=report.seconds, source=source,
        removed=dict(report.removed), batches=report.batches, longest_ms=report.longest_ms,
        longest_at=report.longest_at[:250], error="; ".join(report.errors)[:2000])
    return run


def run_pruner(*, stop: threading.Event, every_s: Callable[[], float]) -> None:
    """The services process's pruner: a pass every `every_s()` seconds until `stop`. A failing
    database is logged once while it fails, and tried again at the next pass."""
    failing = ""
    while not stop.is_set():
        started = timezone.now()
        try:
            report = prune(stop=stop)
            record(report, started=started, source="services")
            failing = _say(report, failing)
        except Exception as exc:  # logged; a crash would restart every service
            text = f"{type(exc).__name__}: {exc}"
            if text != failing:
                log.exception("pruner: %s; trying again in %.0f s", text, every_s())
            failing = text
        _close_db()
        stop.wait(every_s())


def _say(report: Report, failing: str) -> str:
    if report.errors:
        text = "; ".join(report.errors)
        if text != failing:
            log.warning("pruner: %s", text)
        return text
    if failing:
        log.warning("pruner: working again")
    gone = {k: n for k, n in report.removed.items() if n}
    if gone:
        log.info("pruned %s in %.1f s (%d batches, longest %.0f ms)",
                 ", ".join(f"{n:,} {k}" for k, n in gone.items()), report.seconds,
                 report.batches, report.longest_ms)
    return ""


def _close_db() -> None:
    """This thread's connection is closed when past its age or broken, as after a request."""
    if not connection.in_atomic_block:
        connection.close_if_unusable_or_obsolete()

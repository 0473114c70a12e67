"""The database side of the mirror: events and dead letters applied to Request and DeadLetter
rows, idempotently.

A request's row is its Redis hash, read (pipelined) when its events are applied, so what a row
says never depends on which events were seen: replaying them changes nothing. What only events
carry is counted once per event id: `last_event_id` is the newest one applied, and a
completion older than it is not counted again. When the hash is gone (retention over), the
row keeps what it said, updated by the events' own fields, and gets `expired_at`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connections, router, transaction

from core.models import DeadLetter, Request
from core.queue import introspect
from core.queue.client import Queue
from core.queue.follow import Entry, sid
from core.queue.models import STATES, TERMINAL_STATES, PageCursor, RequestInfo

from .fingerprint import fingerprint
from .search import index_letters, index_requests

UNFINISHED = [s for s in STATES if s not in TERMINAL_STATES]
CHUNK = 500  # requests per Redis pipeline and per database statement
# Events that take dead letters out of the dead stream, and what the letters become.
RESOLUTIONS = {"requeued": "requeued", "discarded": "deleted", "deleted": "deleted"}
# Every field an upsert writes (all but the key), and a new row's values before any.
FIELDS = [
    f.name for f in Request._meta.concrete_fields
    if f.name not in ("id", "queue", "request_id")
]
DEFAULTS = {
    f.name: f.get_default() for f in Request._meta.concrete_fields if f.name in FIELDS
} | {"state": "active", "updated_at": None}  # "active" unless the events say more


def ms_dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def id_dt(entry_id: str) -> datetime:
    """The time in a stream id (the Redis server's clock when the entry was added)."""
    return ms_dt(sid(entry_id)[0])


@dataclass
class Applied:
    requests: int = 0
    dead_letters: int = 0
    resolved: int = 0


def fetch(q: Queue, rids: Iterable[str]) -> dict[str, RequestInfo]:
    """The hashes of `rids` that still exist (introspect.requests_many: pipelined)."""
    return introspect.requests_many(q, list(rids))


def apply_batch(
    q: Queue, events: Sequence[Entry], dead: Sequence[Entry], *, now: datetime | None = None
) -> Applied:
    """Apply one batch read from the queue's streams, in one database transaction."""
    now = now or datetime.now(UTC)
    by_request: dict[str, list[Entry]] = {}
    for eid, f in events:
        if rid := f.get("request"):
            by_request.setdefault(rid, []).append((eid, f))
    infos = fetch(q, by_request)
    letters = [dead_letter(q.name, eid, f) for eid, f in dead]
    resolving = {
        f["request"]: (RESOLUTIONS[f["type"]], id_dt(eid))
        for eid, f in events if f.get("type") in RESOLUTIONS and f.get("request")
    }
    gone = _resolved(q, resolving, letters)
    for letter in letters:
        if letter.entry_id in gone:
            letter.resolution, letter.resolved_at = resolving[letter.request_id]
    with transaction.atomic():
        DeadLetter.objects.bulk_create(letters, ignore_conflicts=True, batch_size=CHUNK)
        resolved = 0
        for rid, (resolution, at) in resolving.items():
            ids = [e for e in gone if gone[e] == rid]
            resolved += DeadLetter.objects.filter(
                queue=q.name, request_id=rid, entry_id__in=ids, resolution=""
            ).update(resolution=resolution, resolved_at=at)
        n = upsert(q.name, {rid: (infos.get(rid), evs) for rid, evs in by_request.items()}, now)
        index_letters(q.name, letters)
    return Applied(n, len(letters), resolved + sum(1 for x in letters if x.resolution))


def _resolved(
    q: Queue, resolving: dict[str, tuple[str, datetime]], letters: list[DeadLetter]
) -> dict[str, str]:
    """Dead letters of the `resolving` requests (unresolved rows, or new in this batch) that
    are gone from the dead stream: entry id -> request id."""
    if not resolving:
        return {}
    candidates = {x.entry_id: x.request_id for x in letters if x.request_id in resolving}
    rows = DeadLetter.objects.filter(
        queue=q.name, request_id__in=list(resolving), resolution=""
    ).values_list("entry_id", "request_id")
    candidates.update(dict(rows))
    ids = list(candidates)
    present = introspect.dead_letters_present(q, ids)
    return {eid: candidates[eid] for eid in ids if eid not in present}


def dead_letter(queue: str, eid: str, f: dict[str, str]) -> DeadLetter:
    """The row of one dead-stream entry, fingerprinted."""
    handler = f.get("handler", "")
    fp = fingerprint(handler, f.get("error", ""))
    ts = int(f.get("ts") or 0)
    return DeadLetter(
        queue=queue, entry_id=eid, request_id=f.get("request", ""), task_id=f.get("task", ""),
        handler=handler, tenant=f.get("tenant", ""), exception=fp.exception[:200],
        error=f.get("error", ""), traceback=f.get("traceback", ""),
        payload=f.get("payload", ""), attempts=int(f.get("attempts") or 0),
        worker=f.get("worker", "")[:200], dead_at=ms_dt(ts) if ts else id_dt(eid),
        fingerprint=fp.fingerprint, pattern=fp.pattern,
    )


def upsert(
    queue: str,
    changes: dict[str, tuple[RequestInfo | None, list[Entry]]],
    now: datetime,
    *,
    reconciled_to: str = "",
) -> int:
    """Write the rows of `changes` (request id -> its hash, if it still exists, and its new
    events) merged with what the rows said. `reconciled_to`: the rows come from the state
    indexes after a gap, and reflect every event up to that id."""
    rids = list(changes)
    rows: list[Row] = []
    for i in range(0, len(rids), CHUNK):
        part = rids[i : i + CHUNK]
        old = {
            r.pop("request_id"): r
            for r in Request.objects.filter(queue=queue, request_id__in=part)
            .values("request_id", *FIELDS)
        }
        rows += [
            merge(rid, old.get(rid), *changes[rid], now, reconciled_to=reconciled_to)
            for rid in part
        ]
    _write(queue, rids, rows)
    index_requests(queue, dict(zip(rids, rows, strict=True)),
                   {rid: changes[rid][1] for rid in rids}, every=bool(reconciled_to))
    return len(rows)


def _write(queue: str, rids: list[str], rows: list[Row]) -> None:
    """INSERT ... ON CONFLICT (queue, request_id) DO UPDATE, CHUNK rows a statement: several
    times faster than bulk_create(update_conflicts=True), which makes one statement per 45 rows
    on SQLite. On PostgreSQL the rows go as one array per column (unnest), so the statement
    stays short and its parsing is cached; elsewhere as a VALUES list."""
    conn = connections[router.db_for_write(Request)]
    qn = conn.ops.quote_name
    cols = ["queue", "request_id", *FIELDS]
    head = f"INSERT INTO {qn(Request._meta.db_table)} ({', '.join(map(qn, cols))}) "
    tail = (f" ON CONFLICT ({qn('queue')}, {qn('request_id')}) DO UPDATE SET "
            + ", ".join(f"{qn(c)} = EXCLUDED.{qn(c)}" for c in FIELDS))
    postgres = conn.vendor == "postgresql"
    adapt = conn.ops.adapt_datetimefield_value
    with conn.cursor() as cursor:
        for i in range(0, len(rows), CHUNK):
            part = list(zip(rids[i : i + CHUNK], rows[i : i + CHUNK], strict=True))
            values = [
                [queue, rid, *(adapt(v) if isinstance(v, datetime) and not postgres else v
                               for v in (row[f] for f in FIELDS))]
                for rid, row in part
            ]
            if postgres:
                types = [Request._meta.get_field(c).db_type(conn) for c in cols]
                arrays = ", ".join(f"%s::{t}[]" for t in types)
                cursor.execute(f"{head}SELECT * FROM unnest({arrays}){tail}",
                               [list(column) for column in zip(*values, strict=True)])
            else:
                one = f"({', '.join(['%s'] * len(cols))})"
                cursor.execute(f"{head}VALUES {', '.join([one] * len(part))}{tail}",
                               [v for row in values for v in row])


Row = dict[str, Any]  # a Request row's FIELDS by name


def merge(
    rid: str,
    old: Row | None,
    info: RequestInfo | None,
    events: list[Entry],
    now: datetime,
    *,
    reconciled_to: str = "",
) -> Row:
    """One request's new row: its hash if it exists, else the old row brought forward by the
    events not applied yet."""
    row: Row = dict(old) if old is not None else dict(DEFAULTS)
    last = row["last_event_id"]
    fresh = [(eid, f) for eid, f in events if sid(eid) > sid(last)]
    row["completions"] += sum(1 for _, f in fresh if f.get("type") == "completed")
    row["last_event_id"] = max([last, reconciled_to, *(e for e, _ in events)], key=sid)
    times = [id_dt(eid) for eid, _ in events]
    if row["updated_at"] is not None:
        times.append(row["updated_at"])  # never back: replaying older events changes nothing
    if info is not None:
        _from_hash(row, info)
        if reconciled_to and info.state in TERMINAL_STATES:
            row["completions"] = max(row["completions"], 1)  # its completed event may be lost
    else:
        if old is None:
            row["created_at"] = min(times) if times else now
        for eid, f in fresh:
            _from_event(row, eid, f)
        row["expired_at"] = row["expired_at"] or now
    row["updated_at"] = max([row["updated_at"] or row["created_at"], *times])
    return row


def _from_hash(row: Row, h: RequestInfo) -> None:
    final = h.state in TERMINAL_STATES
    row.update(
        state=h.state, priority=h.priority, concurrency=h.concurrency, tenant=h.tenant,
        handler=h.handler, max_attempts=h.max_attempts, total=h.total, waiting=h.waiting,
        leased=h.leased, delayed=h.delayed, done=h.done, dead=h.dead, cancelled=h.cancelled,
        discarded=h.discarded, created_at=ms_dt(h.created_ms),
        updated_at=ms_dt(max(h.updated_ms, h.created_ms)),
        finished_at=ms_dt(h.finished_ms) if final and h.finished_ms else None, expired_at=None,
    )


def _from_event(row: Row, eid: str, f: dict[str, str]) -> None:
    """What an event says of its request, for a row whose hash is gone."""
    kind = f.get("type")
    final = row["state"] in TERMINAL_STATES

    def num(name: str) -> int:
        return int(f.get(name) or 0)

    if kind == "submitted":
        row.update(total=num("tasks"), priority=num("priority"), tenant=f.get("tenant", ""))
    elif kind == "sealed":
        row["total"] = num("tasks")
        if not final:
            row["state"] = "active"
    elif kind == "cancelled" and not final:
        row["state"] = "cancelling"
    elif kind == "completed":
        row.update(state=f.get("state") or row["state"], done=num("done"), dead=num("dead"),
                   cancelled=num("cancelled"), waiting=0, leased=0, delayed=0,
                   finished_at=id_dt(eid))
    elif kind == "reopened":
        row.update(state="active", finished_at=None)


def refresh(q: Queue, *, after_pk: int = 0, limit: int = 1000) -> tuple[int, int]:
    """Bring the rows of unfinished requests up to date with their hashes (counters move
    without events while tasks run; a hash gone marks the row expired). Walks `limit` rows
    after `after_pk`; returns (rows written, pk to continue from: 0 when done)."""
    old = list(
        Request.objects.filter(queue=q.name, state__in=UNFINISHED, pk__gt=after_pk,
                               expired_at__isnull=True)  # the (queue, state, ...) index
        .order_by("pk")[:limit]
    )
    if not old:
        return 0, 0
    infos = fetch(q, [r.request_id for r in old])
    now = datetime.now(UTC)
    with transaction.atomic():
        n = upsert(q.name, {r.request_id: (infos.get(r.request_id), []) for r in old}, now)
    return n, old[-1].pk if len(old) == limit else 0


def reconcile(q: Queue, last_id: str, *, page: int = 1000) -> int:
    """Upsert every request of the queue's state indexes from its hash, then mark the rows of
    unfinished requests whose hash is gone: what follows a gap in `events`. `last_id` is the
    stream's last id when the gap was seen: the rows reflect every event up to it."""
    total = 0
    for state in STATES:
        cursor: PageCursor | None = None
        while True:
            got = introspect.requests(q, state, after=cursor, limit=page)
            if got.items:
                now = datetime.now(UTC)
                with transaction.atomic():
                    total += upsert(q.name, {i.id: (i, []) for i in got.items}, now,
                                    reconciled_to=last_id)
            cursor = got.cursor
            if cursor is None:
                break
    after = 0
    while True:
        _, after = refresh(q, after_pk=after)
        if not after:
            break
    return total

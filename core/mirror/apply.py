"""The database side of the mirror: a batch of events and dead letters applied to Request,
RequestEvent, SearchDoc and DeadLetter rows, idempotently, in bulk (core.mirror.bulk).

A batch is prepared first, outside the database transaction: its events grouped by request,
the hashes of the requests whose events do not say all (one pipelined read), its dead letters
fingerprinted. Then, in one transaction: the rows those requests had, merged with what is new
(core.mirror.rows), written; their kept events (core.mirror.events), their search rows
(core.mirror.search) and the new dead letters with them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db import transaction

from core.models import DeadLetter, Request, RequestEvent
from core.queue import read
from core.queue.client import Queue
from core.queue.follow import Entry, gone
from core.queue.models import STATES, TERMINAL_STATES, PageCursor, RequestInfo

from . import bulk
from .commit import locked
from .events import COLUMNS as EVENT_COLUMNS
from .events import Event, kept
from .fingerprint import fingerprint
from .rows import DEFAULTS, FIELDS, Row, final_by_events, id_dt, merge, ms_dt
from .search import index_letters, index_requests

__all__ = ["DEFAULTS", "FIELDS", "Applied", "Prepared", "apply_batch", "commit", "dead_letter",
           "fetch", "id_dt", "ms_dt", "prepare", "reconcile", "refresh", "upsert"]

UNFINISHED = [s for s in STATES if s not in TERMINAL_STATES]
# Events that take dead letters out of the dead stream, and what the letters become.
RESOLUTIONS = {"requeued": "requeued", "discarded": "deleted", "deleted": "deleted"}
KEY = ("queue", "request_id")
ROW_COLUMNS = ["queue", "request_id", *FIELDS]
LETTER_COLUMNS = [f.name for f in DeadLetter._meta.concrete_fields if f.name != "id"]


@dataclass
class Applied:
    requests: int = 0
    dead_letters: int = 0
    resolved: int = 0
    skipped: bool = False  # the guard found the batch in the database already


@dataclass
class Prepared:
    """A batch read from the streams, with what Redis had to say about it."""

    by_request: dict[str, list[Entry]] = field(default_factory=dict)
    infos: dict[str, RequestInfo] = field(default_factory=dict)
    by_events: set[str] = field(default_factory=set)  # hash not read: their events say all
    letters: list[DeadLetter] = field(default_factory=list)
    resolving: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    gone: dict[str, str] = field(default_factory=dict)  # letters left the dead stream


def fetch(q: Queue, rids: Iterable[str]) -> dict[str, RequestInfo]:
    """The hashes of `rids` that still exist (read.requests_many: pipelined)."""
    return read.requests_many(q, list(rids))


def prepare(q: Queue, events: Sequence[Entry], dead: Sequence[Entry]) -> Prepared:
    """What a batch needs from Redis, read before the database transaction."""
    p = Prepared()
    for entry in events:
        if rid := entry[1].get("request"):
            p.by_request.setdefault(rid, []).append(entry)
    p.by_events = {rid for rid, evs in p.by_request.items() if final_by_events(evs)}
    if p.by_events:
        # Their hashes are not read, but one that is gone marks the row expired: read them.
        p.by_events -= gone(q, list(p.by_events))
    p.infos = fetch(q, (rid for rid in p.by_request if rid not in p.by_events))
    p.letters = [dead_letter(q.name, eid, f) for eid, f in dead]
    p.resolving = {
        f["request"]: (RESOLUTIONS[f["type"]], id_dt(eid))
        for eid, f in events if f.get("type") in RESOLUTIONS and f.get("request")
    }
    p.gone = _resolved(q, p.resolving, p.letters)
    for letter in p.letters:
        if letter.entry_id in p.gone:
            letter.resolution, letter.resolved_at = p.resolving[letter.request_id]
    return p


def apply_batch(
    q: Queue, events: Sequence[Entry], dead: Sequence[Entry], *, now: datetime | None = None,
    guard: Callable[[], bool] | None = None,
) -> Applied:
    """Apply one batch read from the queue's streams, in one database transaction. `guard`
    runs first in it (the commit order of several mirrors, core.mirror.commit): False skips
    the batch (the database has it), an exception leaves it for later."""
    return commit(q, prepare(q, events, dead), now=now, guard=guard)


def commit(q: Queue, p: Prepared, *, now: datetime | None = None,
           guard: Callable[[], bool] | None = None) -> Applied:
    """A prepared batch into the database, in one transaction that `guard` starts."""
    with transaction.atomic(using=bulk.connection_for(Request).alias):
        if guard is not None and not guard():
            return Applied(skipped=True)
        return write(q, p, now or datetime.now(UTC))


def write(q: Queue, p: Prepared, now: datetime) -> Applied:
    """The prepared batch into the database (in the caller's transaction)."""
    new_letters = _insert_letters(q.name, p.letters)
    resolved = 0
    for rid, (resolution, at) in p.resolving.items():
        ids = [e for e in p.gone if p.gone[e] == rid]
        resolved += DeadLetter.objects.filter(
            queue=q.name, request_id=rid, entry_id__in=ids, resolution=""
        ).update(resolution=resolution, resolved_at=at)
    changes = {rid: (p.infos.get(rid), evs) for rid, evs in p.by_request.items()}
    n = upsert(q, changes, now, by_events=p.by_events)
    index_letters(q.name, new_letters)
    return Applied(n, len(p.letters), resolved + sum(1 for x in new_letters if x.resolution))


def _insert_letters(queue: str, letters: list[DeadLetter]) -> list[DeadLetter]:
    """The letters not in the database yet, inserted; returns them."""
    have = {r[0] for r in bulk.select(DeadLetter, ["entry_id"], {"queue": queue}, "entry_id",
                                      [x.entry_id for x in letters])}
    new = [x for x in letters if x.entry_id not in have]
    bulk.insert(DeadLetter, LETTER_COLUMNS,
                [[getattr(x, c) for c in LETTER_COLUMNS] for x in new], key=("queue", "entry_id"))
    return new


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
    present = read.dead_letters_present(q, ids)
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
        fingerprint=fp.fingerprint, pattern=fp.pattern, resolution="", resolved_at=None,
    )


def old_rows(queue: str, rids: Sequence[str]) -> dict[str, Row]:
    """The rows these requests have (FIELDS by name), read in bulk."""
    got = bulk.select(Request, ["request_id", *FIELDS], {"queue": queue}, "request_id", rids)
    return {r[0]: dict(zip(FIELDS, r[1:], strict=True)) for r in got}


def upsert(
    q: Queue,
    changes: dict[str, tuple[RequestInfo | None, list[Entry]]],
    now: datetime,
    *,
    reconciled_to: str = "",
    by_events: set[str] | frozenset[str] = frozenset(),
    unless_moved: dict[str, str] | None = None,
) -> int:
    """Write the rows of `changes` (request id -> its hash, if read and still there, and its
    new events) merged with what the rows said. `reconciled_to`: the rows come from the state
    indexes after a gap, and reflect every event up to that id. `by_events`: requests whose
    hash was not read (their events say all), read now if their row is missing. `unless_moved`
    (request id -> last_event_id): rows whose events moved on since are left as they are."""
    rids = list(changes)
    old = old_rows(q.name, rids)
    if unless_moved is not None:
        rids = [rid for rid in rids if old.get(rid, {}).get("last_event_id", "")
                == unless_moved.get(rid, "")]
    missing = [rid for rid in rids if rid in by_events and rid not in old]
    infos = fetch(q, missing) if missing else {}
    new: list[list[object]] = []
    changed: list[list[object]] = []
    timeline: list[Event] = []
    rows: dict[str, Row] = {}
    for rid in rids:
        info, events = changes[rid]
        before = old.get(rid)
        quick = rid in by_events and before is not None
        row = merge(rid, before, info or infos.get(rid), events, now,
                    reconciled_to=reconciled_to, by_events=quick)
        if events:
            timeline += kept(q.name, rid, row, events, before["last_event_id"] if before else "")
        rows[rid] = row
        (changed if before is not None else new).append([q.name, rid, *(row[f] for f in FIELDS)])
    bulk.insert(Request, ROW_COLUMNS, new, key=KEY, update=FIELDS)
    bulk.upsert(Request, ROW_COLUMNS, changed, key=KEY, update=FIELDS)
    bulk.append(RequestEvent, EVENT_COLUMNS, timeline)
    index_requests(q.name, rows, {rid: changes[rid][1] for rid in rids},
                   every=bool(reconciled_to))
    return len(rows)


def refresh(q: Queue, *, after_pk: int = 0, limit: int = 1000) -> tuple[int, int]:
    """Bring the rows of unfinished requests up to date with their hashes (counters move
    without events while tasks run; a hash gone marks the row expired). Walks `limit` rows
    after `after_pk`; returns (rows written, pk to continue from: 0 when done). A row that a
    batch moved on meanwhile (another mirror process) is left to it."""
    old = list(
        Request.objects.filter(queue=q.name, state__in=UNFINISHED, pk__gt=after_pk,
                               expired_at__isnull=True)  # the (queue, state, ...) index
        .order_by("pk").values_list("pk", "request_id", "last_event_id")[:limit]
    )
    if not old:
        return 0, 0
    infos = fetch(q, [rid for _, rid, _ in old])
    now = datetime.now(UTC)
    with transaction.atomic(using=bulk.connection_for(Request).alias), locked(q.name):
        n = upsert(q, {rid: (infos.get(rid), []) for _, rid, _ in old}, now,
                   unless_moved={rid: last for _, rid, last in old})
    return n, old[-1][0] if len(old) == limit else 0


def reconcile(q: Queue, last_id: str, *, page: int = 1000) -> int:
    """Upsert every request of the queue's state indexes from its hash, then mark the rows of
    unfinished requests whose hash is gone: what follows a gap in `events`. `last_id` is the
    stream's last id when the gap was seen: the rows reflect every event up to it."""
    total = 0
    for state in STATES:
        cursor: PageCursor | None = None
        while True:
            got = read.requests(q, state, after=cursor, limit=page)
            if got.items:
                now = datetime.now(UTC)
                with transaction.atomic(using=bulk.connection_for(Request).alias), \
                        locked(q.name):
                    total += upsert(q, {i.id: (i, []) for i in got.items}, now,
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

"""The order of the mirror's writes, so that several mirror processes (consumers of one group,
`runmirror --processes N`, or several `runmirror --consumer NAME`) write each event once and
in the stream's order, also across a `kill -9` of any of them.

Each queue has a position in the database (core.models.MirrorPosition): the last `events`
entry whose batch the database holds. Every batch's transaction starts by locking it (a write
that takes the row's lock on PostgreSQL, the database's on SQLite) and ends by moving it on:
- a batch whose events are all at or before the position is in the database already (its
  mirror died between the commit and the acknowledgement): it is acknowledged, not applied;
- a batch that starts after an entry still pending with another consumer (an earlier batch,
  read before it, not committed yet) waits (Waiting) until that one is committed, or, if it
  stays pending for `claim_after`, claims it (a mirror that died before its commit: nothing
  it read is lost) and applies the two as one.
Within that order the rows' own marks (`last_event_id`, `last_dead_id`, a dead letter's entry
id) keep a replay from writing anything twice, as with one mirror.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from django.db import connections, router

from core.models import MirrorPosition
from core.queue import QueueadminError
from core.queue.follow import ZERO, Batch, Streams, sid


class Waiting(QueueadminError):
    """A batch's turn has not come: an earlier batch is still pending with another consumer."""

    def __init__(self, applied: str) -> None:
        super().__init__(f"an earlier batch is pending (the database has events to {applied})")
        self.applied = applied


def _conn() -> Any:
    return connections[router.db_for_write(MirrorPosition)]


@contextmanager
def locked(queue: str) -> Iterator[str]:
    """Inside a transaction: lock the queue's position until the transaction ends (made if the
    queue has none yet); yields it. The lock is a write, so on SQLite it is the database's
    write lock, taken before anything is read: two mirrors never deadlock on an upgrade."""
    conn = _conn()
    qn = conn.ops.quote_name
    table = qn(MirrorPosition._meta.db_table)
    now = datetime.now(UTC)
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO {table} ({qn('queue')}, {qn('applied_to')}, {qn('updated_at')}) "
                    f"VALUES (%s, %s, %s) ON CONFLICT ({qn('queue')}) DO UPDATE SET "
                    f"{qn('updated_at')} = EXCLUDED.{qn('updated_at')} RETURNING "
                    f"{qn('applied_to')}", [queue, ZERO, now])
        (applied,) = cur.fetchone()
    yield str(applied)


def move(queue: str, to: str) -> None:
    """Set the queue's position (in the transaction that locked it)."""
    MirrorPosition.objects.filter(queue=queue).update(applied_to=to,
                                                      updated_at=datetime.now(UTC))


def position(queue: str) -> str:
    """The queue's position as committed (no lock)."""
    got = MirrorPosition.objects.filter(queue=queue).values_list("applied_to", flat=True).first()
    return got or ZERO


def guard(streams: Streams, batch: Batch) -> Callable[[], bool]:
    """The check that starts a batch's transaction (core.mirror.apply.apply_batch's `guard`):
    raises Waiting if an earlier batch is pending elsewhere, returns False if the database
    has the whole batch, else moves the position to the batch's last event and returns True."""

    def check() -> bool:
        queue = streams.queue.name
        with locked(queue) as applied:
            if not batch.events:
                return bool(batch.dead)
            first, last = batch.events[0][0], batch.events[-1][0]
            if sid(last) <= sid(applied):
                return bool(batch.dead)
            # After a gap, the stream's order is the reconciliation's business. A fresh
            # batch is one run of the stream: only what comes before it can be pending
            # elsewhere; one read again or claimed may have another's entries within it.
            if not batch.gap and (streams.blocking(applied, first) if batch.fresh
                                  else streams.others_pending(applied, batch)):
                raise Waiting(applied)
            move(queue, last)
            return True

    return check


def merged(batch: Batch, claimed: Batch) -> Batch:
    """A batch and the entries claimed before it, as one (in stream order)."""
    out = Batch(fresh=False, before=batch.before, last_id=batch.last_id, gap=batch.gap)
    out.events = sorted({e[0]: e for e in (*claimed.events, *batch.events)}.values(),
                        key=lambda e: sid(e[0]))
    out.dead = sorted({e[0]: e for e in (*claimed.dead, *batch.dead)}.values(),
                      key=lambda e: sid(e[0]))
    out.lost = [*claimed.lost, *batch.lost]
    out.dead_gone = [*claimed.dead_gone, *batch.dead_gone]
    return out

"""Following a queue's `events` and `dead` streams from outside the engine (the mirror,
core/mirror, is the follower): read through a consumer group of the follower's own, gaps
found, and `events` trimmed behind every group. The engine's part of the mirror: the stream
keys stay in the engine.

No Django here. A batch is read, applied to the database by the caller, then acknowledged:
what was read but not acknowledged (a crash, a database error) is read again from the group's
pending entries, so nothing is applied without being read twice or more, never less.

Several followers may share a group, each its own consumer: a read hands each the next entries
nobody has had (`>`), so the group's batches are consecutive runs of the stream. The caller
applies them in that order (blocking(): an earlier run is still pending elsewhere), and takes
over a dead consumer's entries once they have been pending for a while (claim()). lag() says
how far behind the stream's newest entry a group is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import redis

from .base import QueueBase, translated

Entry = tuple[str, dict[str, str]]
ZERO = "0-0"
TRIM_CALLS_MAX = 100  # per trim(): up to a million entries


def _by_stream(reply: Any) -> dict[str, list[Entry]]:
    """XREADGROUP's reply as stream -> [(id, fields)], whichever shape redis-py gives it: a
    list of [stream, parsed entries], or, from a cluster client's transaction, a dict of raw
    ones ([id, [field, value, ...]])."""
    if not reply:
        return {}
    pairs = reply.items() if isinstance(reply, dict) else reply
    return {stream: [(eid, _fields(f)) for eid, f in entries] for stream, entries in pairs}


def _fields(f: Any) -> dict[str, str]:
    if isinstance(f, dict):
        return f
    return dict(zip(f[::2], f[1::2], strict=True)) if f else {}


def _delivered(groups: list[dict[str, Any]], group: str) -> str:
    """The group's last delivered id, from XINFO GROUPS (ZERO if it has none yet)."""
    mine = [g for g in groups if g["name"] == group]
    return str(mine[0]["last-delivered-id"]) if mine else ZERO


def _next(entry_id: str) -> str:
    """The smallest stream id after `entry_id`."""
    ms, seq = sid(entry_id)
    return f"{ms}-{seq + 1}"


@lru_cache(maxsize=65536)  # the mirror compares each id several times
def sid(entry_id: str) -> tuple[int, int]:
    """A stream id as a pair that compares in stream order ("" and "0" are the start)."""
    ms, _, seq = (entry_id or "0").partition("-")
    return int(ms), int(seq or 0)


@dataclass
class Batch:
    """What one read returned. `gap` is set when entries of `events` after this group's
    position were deleted before it read them (the stream's first id, and its last id, at the
    time); `lost` lists pending entries whose contents were deleted (acknowledged with the
    batch: there is nothing to read again)."""

    events: list[Entry] = field(default_factory=list)
    dead: list[Entry] = field(default_factory=list)
    gap: tuple[str, str] | None = None
    lost: list[str] = field(default_factory=list)
    # Pending dead letters deleted since they were read (requeued): nothing to apply.
    dead_gone: list[str] = field(default_factory=list)
    last_id: str = ZERO  # the events stream's last id when read
    before: str = ZERO  # the group's position before this read
    # Read as new entries (`>`): a run of the stream that follows everything delivered
    # before it. Pending entries read again, or claimed from another consumer, are not.
    fresh: bool = True

    def __len__(self) -> int:
        return len(self.events) + len(self.dead)


class Streams:
    """One queue's streams as one consumer of a group sees them: a consumer re-reads its own
    pending entries after a restart; several consumers of one group share the entries."""

    def __init__(
        self, queue: QueueBase, *, group: str, count: int = 1000, consumer: str = ""
    ) -> None:
        self.queue = queue
        self.group = group
        self.consumer = consumer or group
        self.count = count
        self.events_key = queue.keys.events
        self.dead_key = queue.keys.dead
        self.position = ZERO  # the last events id delivered to the group
        self.handled = ZERO  # a trim up to this first id was reconciled by this process
        # Where the next read starts per stream: an id = its own pending entries after it;
        # ">" = new entries.
        self._from = {self.events_key: "0", self.dead_key: "0"}

    @property
    def r(self) -> Any:
        return self.queue.redis

    def setup(self) -> bool:
        """Make sure both groups exist (a new one starts at the beginning of its stream),
        learn the group's position, and read pending entries first. True if the events group
        was created now."""
        created = False
        with translated("mirror setup"):
            for key in (self.events_key, self.dead_key):
                try:
                    self.r.xgroup_create(key, self.group, id="0", mkstream=True)
                    created |= key == self.events_key
                except redis.ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise
            groups = self.r.xinfo_groups(self.events_key)
        self.position = _delivered(groups, self.group)
        self._from = {self.events_key: "0", self.dead_key: "0"}
        return created

    @property
    def rereading(self) -> bool:
        """True while the group's own pending entries are being read again."""
        return any(v != ">" for v in self._from.values())

    def read(self) -> Batch:
        """The next batch: pending entries first, then new ones. The stream's first entry and
        the new events are read in one transaction, so a trim past the group's position is
        always seen before the position moves past it."""
        with translated("mirror read"):
            pipe = self.r.pipeline(transaction=True)
            pipe.xinfo_stream(self.events_key)
            pipe.xinfo_groups(self.events_key)
            pipe.xreadgroup(self.group, self.consumer, dict(self._from), count=self.count)
            info, groups, reply = pipe.execute()
        # Where the group was before this read: other consumers of it move it too.
        self.position = _delivered(groups, self.group)
        batch = Batch(last_id=info.get("last-generated-id") or ZERO, before=self.position,
                      fresh=self._from[self.events_key] == ">")
        got = _by_stream(reply)
        for key in (self.events_key, self.dead_key):
            entries = got.get(key, [])
            start = self._from[key]
            kept = [(eid, f) for eid, f in entries if f]
            if start == ">":
                if key == self.events_key:
                    batch.gap = self._gap(info)
                    if entries:
                        self.position = entries[-1][0]
            else:
                # Own pending entries: deleted ones come back without fields.
                if key == self.events_key:
                    batch.lost += [eid for eid, f in entries if not f]
                else:
                    batch.dead_gone += [eid for eid, f in entries if not f]
                self._from[key] = entries[-1][0] if entries else ">"
            if key == self.events_key:
                batch.events = kept
            else:
                batch.dead = kept
        return batch

    def _gap(self, info: dict[str, Any]) -> tuple[str, str] | None:
        """(the stream's first id, its last id) if entries after the group's position were
        deleted before the group read them; None if not, or if this process reconciled that
        deletion already. Entries go only from the head of `events` (trimming): mirrors trim
        behind every group's position and keep the entry at it, so a first entry past the
        position means someone else (the engine's cap, an operator) trimmed the stream past
        it. A group that starts at 0-0 has missed whatever was ever trimmed."""
        first = info.get("first-entry")
        last = str(info.get("last-generated-id") or ZERO)
        mark = str(first[0]) if first and first[0] else last
        if self.position == ZERO:
            lost = int(info.get("entries-added") or 0) > int(info.get("length") or 0)
        elif first and first[0]:
            lost = sid(first[0]) > sid(self.position)
        else:  # empty: trimmed to nothing, which loses whatever came after the position
            lost = sid(last) > sid(self.position)
        if lost and sid(mark) > sid(self.handled):
            return mark, last
        return None

    def ack(self, batch: Batch) -> None:
        """Acknowledge a batch applied (and committed): its entries are not read again."""
        with translated("mirror ack"):
            pipe = self.r.pipeline(transaction=False)
            if batch.events or batch.lost:
                pipe.xack(self.events_key, self.group,
                          *(eid for eid, _ in batch.events), *batch.lost)
            if batch.dead or batch.dead_gone:
                pipe.xack(self.dead_key, self.group,
                          *(eid for eid, _ in batch.dead), *batch.dead_gone)
            pipe.execute()

    def rewind(self, position: str) -> None:
        """Put the group back at `position` (after a gap: what was read past it is read
        again once reconciled, and a crash meanwhile finds the gap again)."""
        with translated("mirror rewind"):
            self.r.xgroup_setid(self.events_key, self.group, position)
        self.position = position
        self._from[self.events_key] = ">"

    def blocking(self, applied: str, first: str) -> bool:
        """True if an entry of `events` after `applied` and before `first` is still pending in
        the group (delivered to a consumer, its batch not committed or not yet acknowledged):
        a batch that starts at `first` must then wait for it, so that batches are applied in
        the stream's order."""
        if sid(first) <= sid(_next(applied)):
            return False
        with translated("mirror pending"):
            rows = self.r.xpending_range(self.events_key, self.group, min=f"({applied}"
                                         if sid(applied) > (0, 0) else "-",
                                         max=f"({first}", count=1)
        return bool(rows)

    def others_pending(self, applied: str, batch: Batch) -> bool:
        """True if an entry of `events` after `applied` and up to the batch's last one is
        pending in the group and not in the batch: a batch that is not one fresh run of the
        stream (pending entries read again, or claimed) may hold several runs, and must wait
        for what another consumer holds between them. One XPENDING of at most the batch's
        size plus one: every entry of the batch is pending, so one more is another's."""
        ids = {eid for eid, _ in batch.events}
        start = f"({applied}" if sid(applied) > (0, 0) else "-"
        with translated("mirror pending"):
            rows = self.r.xpending_range(self.events_key, self.group, min=start,
                                         max=batch.events[-1][0], count=len(ids) + 1)
        return any(str(row["message_id"]) not in ids for row in rows)

    def claim(self, min_idle_ms: int, *, after: str = ZERO) -> Batch:
        """Take over the group's entries pending for at least `min_idle_ms` with another
        consumer (one that died, or stalls), `events` from after `after` (what the database
        already has), and the dead letters: a batch of pending entries (not `fresh`)."""
        batch = Batch(fresh=False, before=self.position)
        with translated("mirror claim"):
            for key, start in ((self.events_key, _next(after)), (self.dead_key, "0-0")):
                reply = self.r.xautoclaim(key, self.group, self.consumer, min_idle_ms,
                                          start_id=start, count=self.count)
                entries = [(eid, _fields(f)) for eid, f in reply[1] if eid]
                deleted = [str(x) for x in (reply[2] if len(reply) > 2 else [])]
                kept = [(eid, f) for eid, f in entries if f]
                if key == self.events_key:
                    batch.events, batch.lost = kept, deleted
                else:
                    batch.dead, batch.dead_gone = kept, deleted
        return batch

    def recover(self) -> None:
        """After an error: read pending entries again, and ask Redis where the group is."""
        self.setup()

    def trim(self) -> str | None:
        """Trim `events` behind what every consumer group of it has acknowledged (entries
        some group has not read, or read and not acknowledged, stay). Returns the MINID used,
        or None when nothing can go."""
        with translated("mirror trim"):
            groups = self.r.xinfo_groups(self.events_key)
            if not groups:
                return None
            pipe = self.r.pipeline(transaction=False)
            for g in groups:
                pipe.xpending(self.events_key, g["name"])
            summaries = pipe.execute()
            keep = min(
                (s["min"] if s["pending"] else g["last-delivered-id"]
                 for g, s in zip(groups, summaries, strict=True)),
                key=sid,
            )
            if sid(keep) <= (0, 0):
                return None
            # An approximate trim removes whole nodes, at most 10,000 entries per call.
            for _ in range(TRIM_CALLS_MAX):
                if not self.r.xtrim(self.events_key, minid=keep, approximate=True):
                    break
        return str(keep)


def lag(queue: QueueBase, group: str, *, now_ms: int) -> float | None:
    """How far behind the queue's `events` and `dead` streams the group is, in seconds: the
    age (at `now_ms`, the Redis server's clock) of the oldest entry it has not acknowledged,
    0.0 when it has them all; None when the group does not exist (no follower ever ran).
    Four reads in one round trip per stream, whatever the backlog."""
    worst: float | None = None
    r: Any = queue.redis
    for key in (queue.keys.events, queue.keys.dead):
        with translated("mirror lag"):
            pipe = r.pipeline(transaction=False)
            pipe.exists(key)
            pipe.xinfo_groups(key)
            pipe.xpending(key, group)
            exists, groups, pending = pipe.execute(raise_on_error=False)
            if not exists or isinstance(groups, Exception) or not any(
                    g["name"] == group for g in groups):
                continue
            if isinstance(pending, Exception):
                raise pending
            oldest = [pending["min"]] if pending and pending.get("pending") else []
            following = r.xrange(key, min=f"({_delivered(groups, group)}", count=1)
            oldest += [eid for eid, _ in following]
        age = max(0.0, (now_ms - min(sid(x)[0] for x in oldest)) / 1000) if oldest else 0.0
        worst = age if worst is None else max(worst, age)
    return worst


def gone(queue: QueueBase, request_ids: list[str], *, chunk: int = 1000) -> set[str]:
    """Which of these requests' hashes Redis no longer has (their retention is over). One
    EXISTS over a chunk's keys says whether all are there (the usual case: one command for
    a thousand requests); only a chunk with some missing is looked at key by key."""
    out: set[str] = set()
    r: Any = queue.redis
    for i in range(0, len(request_ids), chunk):
        part = request_ids[i : i + chunk]
        keys = [queue.keys.request(rid) for rid in part]
        with translated("mirror exists"):
            if r.exists(*keys) == len(set(keys)):
                continue
            pipe = r.pipeline(transaction=False)
            for key in keys:
                pipe.exists(key)
            out |= {rid for rid, n in zip(part, pipe.execute(), strict=True) if not n}
    return out

"""The mirror's loop (`manage.py runmirror`): follow each queue's streams, apply what they say
to the database, acknowledge, trim, sample; survive Redis and database outages.

Per queue and pass: one batch is read (pending entries first, then new ones), applied in one
database transaction, then acknowledged; a gap in `events` (entries deleted before this
mirror read them) is reconciled from the state indexes first. Every SAMPLE_EVERY_S the queue's
counters are sampled and some rows of unfinished requests refreshed from their hashes.

Several mirrors may share a group as its consumers (`consumer`): their batches are committed
in the stream's order (core.mirror.commit), and what one leaves pending for `claim_after_s`
another takes over. Only one of them need keep house (samples, metrics, schedules, refresh);
every one trims.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.db import DatabaseError, connections

from core.queue import RedisReplyError, RedisUnavailable, read
from core.queue.client import Queue
from core.queue.follow import ZERO, Batch, Streams, sid

from . import apply, commit, datajobs, metrics
from .apply import Applied, prepare, reconcile, refresh
from .samples import SAMPLE_EVERY_S, prune, sample
from .schedules import mirror_schedules

log = logging.getLogger("queueadmin.mirror")

REGISTRY_EVERY_S = 10.0  # how often the list of queues is read again (no -q)
TRIM_EVERY_S = 1.0
PRUNE_EVERY_S = 600.0
REFRESH_ROWS = 1000  # rows of unfinished requests refreshed per queue and sample
BACKOFF_FIRST_S, BACKOFF_CAP_S = 0.1, 10.0


@dataclass(frozen=True)
class MirrorConfig:
    queues: tuple[str, ...] = ()  # none: every queue of the registry, followed as they appear
    group: str = "mirror"  # consumer group on each stream (a database per group)
    # Entries read per stream per round trip, applied in one transaction: 4000 caught up
    # 8-13 % faster than 1000 (bench_mirror, SQLite and PostgreSQL), one commit's fsync and
    # the round trips shared by more requests.
    batch: int = 4000
    burst: bool = False  # apply everything there is, then return
    idle_s: float = 0.5  # pause when nothing was read
    sample_every_s: float = SAMPLE_EVERY_S
    consumer: str = ""  # this mirror's name in the group (default: the group's)
    claim_after_s: float = 10.0  # another consumer's entries pending this long are taken over
    housekeeping: bool = True  # samples, metrics, schedules, refresh (one mirror of a group)


@dataclass
class Totals:
    """What a run applied (the command prints it in --burst mode; tests read it)."""

    events: int = 0
    dead_letters: int = 0
    requests: int = 0
    reconciled: int = 0
    gaps: int = 0
    queues: set[str] = field(default_factory=set)


class Follower:
    """One queue followed by the mirror."""

    def __init__(self, q: Queue, config: MirrorConfig, stop: threading.Event | None = None
                 ) -> None:
        self.q = q
        self.config = config
        self.stop = stop or threading.Event()
        self.streams = Streams(q, group=config.group, count=config.batch,
                               consumer=config.consumer)
        self.ready = False
        self.next_claim = 0.0
        self.next_trim = 0.0
        self.next_sample = 0.0
        self.next_metrics = 0.0
        self.next_prune = 0.0
        self.refresh_after = 0

    def step(self, totals: Totals) -> int:
        """Read and apply one batch; returns how many entries it held (at least 1 while
        pending entries were being read again: there may be new ones next)."""
        if not self.ready:
            self.streams.setup()
            self.ready = True
        rereading = self.streams.rereading
        claimed = self._claimed()
        batch = claimed if claimed is not None else self.streams.read()
        if batch.gap or batch.lost:
            self._reconcile(batch, totals)
        if batch.events or batch.dead:
            applied, batch = self._apply(batch)
            if applied is None:
                return 0  # stopped while waiting for its turn: left pending
            totals.requests += applied.requests
            totals.dead_letters += applied.dead_letters
            totals.events += 0 if applied.skipped else len(batch.events)
        datajobs.follow(self.q, batch.events, force=self.config.burst)  # data jobs' rows
        self.streams.ack(batch)
        return len(batch) + len(batch.lost) + rereading

    def _claimed(self) -> Batch | None:
        """Now and then, entries another consumer left pending for claim_after_s (a mirror
        that died), taken over: this step's batch. From the stream's start, not from the
        database's position: what a mirror killed between its commit and its acknowledgement
        left pending is at or before it, and is acknowledged here (the guard skips what the
        database has), else the group would stay that far behind for good."""
        now = time.monotonic()
        if now < self.next_claim:
            return None
        self.next_claim = now + max(self.config.claim_after_s / 2, 1.0)
        batch = self.streams.claim(int(self.config.claim_after_s * 1000))
        return batch if len(batch) or batch.lost or batch.dead_gone else None

    def _apply(self, batch: Batch) -> tuple[Applied | None, Batch]:
        """Apply a batch in its turn (core.mirror.commit); returns what was applied (None if
        stopped first) and the batch acknowledged (with what it claimed on the way)."""
        prepared = prepare(self.q, batch.events, batch.dead)
        waited = pause = 0.0
        claim_from = ZERO
        while True:
            try:
                guard = commit.guard(self.streams, batch)
                return apply.commit(self.q, prepared, guard=guard), batch
            except commit.Waiting as w:
                now = time.monotonic()
                waited = waited or now
                if now - waited >= self.config.claim_after_s:
                    # What a consumer that died held may be more than one claim's worth (its
                    # --batch larger than ours): each claim goes on from the last, at once
                    # while it finds some.
                    claimed = self.streams.claim(int(self.config.claim_after_s * 1000),
                                                 after=max(w.applied, claim_from, key=sid))
                    if claimed.events:
                        claim_from = claimed.events[-1][0]
                    if len(claimed) or claimed.lost:
                        batch = commit.merged(batch, claimed)
                        prepared = prepare(self.q, batch.events, batch.dead)
                    else:
                        waited = now
            pause = min(max(pause * 2, 0.001), 0.05)
            if self.stop.wait(pause):
                return None, batch

    def _reconcile(self, batch: Batch, totals: Totals) -> None:
        if batch.gap:
            # Back to where the group was: a crash during the reconciliation finds the gap
            # again. What this batch read past it is read again afterwards (harmless).
            self.streams.rewind(batch.before)
        n = reconcile(self.q, batch.last_id)
        if batch.gap:
            self.streams.handled = batch.gap[0]
            why = (f"events were trimmed past this mirror's position {batch.before} (the "
                   f"stream now starts at {batch.gap[0]}) before it read them")
        else:
            why = f"{len(batch.lost)} events it had read but not applied were deleted"
        totals.reconciled += n
        totals.gaps += 1
        log.warning("mirror gap queue=%s group=%s: %s; reconciled %d requests from the state "
                    "indexes", self.q.name, self.config.group, why, n)

    def housekeeping(self, now: float, *, force: bool = False) -> None:
        """Trim `events`, sample the counters, mirror the schedules, refresh rows of unfinished
        requests, roll the handlers' metrics and prune old samples and metrics, each when due
        (all of them with force)."""
        # Each is due again only once it has worked: a failure is retried at the next pass.
        if force or now >= self.next_trim:
            self.streams.trim()
            self.next_trim = now + TRIM_EVERY_S
        if not self.config.housekeeping:
            return
        if force or now >= self.next_sample:
            sample(self.q)
            mirror_schedules(self.q)
            _, self.refresh_after = refresh(self.q, after_pk=self.refresh_after,
                                            limit=REFRESH_ROWS)
            self.next_sample = now + self.config.sample_every_s
        if force or now >= self.next_metrics:
            metrics.roll(self.q)
            self.next_metrics = now + metrics.ROLL_EVERY_S
        if force or now >= self.next_prune:
            prune(self.q.name)  # the rest is the pruner's (retention_prune: runservices)
            self.next_prune = now + PRUNE_EVERY_S


class Trouble:
    """Redis or database errors: one log line when they start (and when the kind of error
    changes), one when they stop; a capped exponential backoff meanwhile."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.message = ""
        self.tries = 0

    def failed(self, exc: BaseException) -> float:
        if isinstance(exc, DatabaseError):
            kind = "database error"
        elif isinstance(exc, RedisUnavailable):
            kind = "Redis unavailable"
        elif isinstance(exc, RedisReplyError):
            kind = "Redis error"
        else:
            kind = "unexpected error"
        if kind != self.kind:
            self.kind, self.message = kind, f"{kind}: {exc}"
            text = str(exc)
            if kind == "database error" and (
                "no such table" in text or ("relation" in text and "does not exist" in text)
            ):
                self.message += " (has `manage.py migrate` run on this database?)"
            if kind == "unexpected error":
                log.exception("mirror: %s; retrying with backoff up to %.0fs", self.message,
                              BACKOFF_CAP_S)
            else:
                log.error("mirror: %s; retrying with backoff up to %.0fs", self.message,
                          BACKOFF_CAP_S)
        self.tries += 1
        return float(min(BACKOFF_FIRST_S * 2 ** (self.tries - 1), BACKOFF_CAP_S))

    def recovered(self) -> None:
        if self.kind is not None:
            log.warning("mirror: working again after %s", self.message)
        self.kind, self.tries = None, 0


def run_mirror(
    config: MirrorConfig,
    get_queue: Callable[[str], Queue],
    *,
    stop: threading.Event | None = None,
    names: Callable[[], list[str]] | None = None,
) -> Totals:
    """Follow the queues until `stop` is set (or, in burst mode, until nothing is left).
    `names` lists the queues to follow when config.queues is empty (default: the registry
    of the queues' prefix)."""
    stop = stop or threading.Event()
    totals = Totals()
    followers: dict[str, Follower] = {}
    trouble = Trouble()
    next_names = 0.0
    if names is None:
        probe = get_queue("default")

        def names() -> list[str]:
            return read.queues_beside(probe)

    while not stop.is_set():
        now = time.monotonic()
        busy = 0
        try:
            if now >= next_names:
                next_names = now + REGISTRY_EVERY_S
                for name in config.queues or names():
                    if name not in followers:
                        followers[name] = Follower(get_queue(name), config, stop)
                        totals.queues.add(name)
            for f in followers.values():
                busy += f.step(totals)
                if not config.burst:
                    f.housekeeping(time.monotonic())
            trouble.recovered()
        except Exception as exc:  # logged; a crash would stop make run's whole stack
            if config.burst:
                raise
            wait = trouble.failed(exc)
            for f in followers.values():
                f.ready = False  # read pending entries again, ask where the groups are
            if isinstance(exc, DatabaseError):
                _close_db()
            stop.wait(wait)
            continue
        if config.burst and not busy:
            for f in followers.values():
                f.housekeeping(time.monotonic(), force=True)
            break
        if not busy:
            _tidy_db()
            stop.wait(config.idle_s)
    return totals


def _tidy_db() -> None:
    """Close database connections past their CONN_MAX_AGE or broken, as Django does after a
    request; never one inside a transaction (a test's)."""
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


def _close_db() -> None:
    for conn in connections.all(initialized_only=True):
        with contextlib.suppress(DatabaseError):
            conn.close()

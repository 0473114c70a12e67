"""Per-handler metrics: what the engine counts per minute at ack and fail time, and how to
read and merge it. No Django here.

The engine keeps one hash per queue and minute (QueueKeys.metrics(minute), a TTL of
KEEP_MS) with, per handler, counters by outcome and a run-time histogram in fixed buckets
(BUCKETS_MS), so that minutes, hours and handlers add up by plain sums and p50/p95/p99 are
read from the merged buckets. The worker measures each run and passes its time with the ack
or fail; the Lua side only adds (see `metric()` in lua/_metrics.lua). Fields, for a handler
`h` (handler names are identifiers, which cannot hold "|"):

    h|<i> tasks done whose run time fell in bucket i (0..len(BUCKETS_MS); the last is +Inf)
    h|us  the summed run time of those, in microseconds
    h|d   tasks done without a run time (an ack that sent none)
    h|f   tasks dead-lettered (fail out of attempts or refused retry; the reaper's too)
    h|r   tasks failed and retried (back to waiting or into backoff)
    h|fus the summed run time of the failed (dead-lettered or retried) runs that were timed

Only accepted acks and fails count: a refused one (stolen or expired lease) counts nothing.
Tasks done = h|d + the buckets' sum. The histogram is that of the runs done: a run that
failed at once would pull the percentiles down; its time counts in the time spent.

Two ways in. An ack may carry its run's time (`token()`), which the engine counts when it
accepts the ack: ack(), ack_many(), and what a worker sends after a pause. A worker's hot
path does not: it adds its accepted acks' times to a Tally and sends the sums with one of
its calls about once a second (`Tally.take_due()`), so that a one-task ack writes nothing
more than the ack (two HINCRBYs per call cost a one-task request 9 % of its rate). The price:
up to a second of a worker's counts is lost if it is killed (`kill -9`), and a count sent
just after a minute's end falls in the next minute.
"""

from __future__ import annotations

import bisect
import re
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

MINUTE_MS = 60_000
# Upper bounds (ms) of the run-time buckets, Prometheus' 1-2.5-5 steps from 1 ms to an hour;
# a last bucket (+Inf) takes what is longer. Changing them changes the meaning of stored
# bucket indexes: add a new layout rather than edit this one.
BUCKETS_MS: tuple[float, ...] = (
    1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000,
    120_000, 300_000, 600_000, 1_800_000, 3_600_000,
)
NBUCKETS = len(BUCKETS_MS) + 1
KEEP_MS = 86_400_000  # a minute's hash lives a day: the database mirror has it long before
OUTCOMES = {"d": "done", "f": "failed", "r": "retried"}


def minute_of(ms: int) -> int:
    """The minute (since the epoch) a time in ms falls in: the metrics key's number."""
    return ms // MINUTE_MS


def bucket_of(seconds: float) -> int:
    """The index of the bucket a run of `seconds` falls in (le semantics: 1 ms is bucket 0)."""
    return bisect.bisect_left(BUCKETS_MS, seconds * 1000)


def token(seconds: float | None) -> str:
    """One run's time as the engine takes it: "<bucket>:<microseconds>", or "-" (not timed)."""
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    return f"{bisect.bisect_left(BUCKETS_MS, seconds * 1000)}:{int(seconds * 1_000_000)}"


def tokens(n: int, durations: Sequence[float | None] | None) -> str:
    """The timings argument of n acks: one token each, separated by spaces."""
    if durations is None:
        return " ".join("-" * n)
    if len(durations) != n:
        raise ValueError(f"{len(durations)} durations for {n} acks")
    return " ".join([token(d) for d in durations])


TALLY_FLUSH_S = 1.0  # a worker sends its tallied metrics at most this long after counting
_TALLY_FIELD = re.compile(r"[^|\s]+\|(?:\d+|us|d)")


class Tally:
    """A worker's accepted acks not yet counted by the engine, per handler: the fields and
    increments of this minute's hash (`h|<bucket>`, `h|us`, `h|d`). Thread-safe: the
    worker's slots add, whichever call comes first after TALLY_FLUSH_S sends."""

    def __init__(self, flush_s: float = TALLY_FLUSH_S) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._since: float | None = None  # when the oldest count not sent was added
        self._fields: dict[str, list[str]] = {}  # handler -> its field names (add())
        self.flush_s = flush_s

    def add(self, handlers: Sequence[str], durations: Sequence[float | None],
            accepted: Sequence[bool]) -> None:
        """Count the accepted ones of a call's acks (their handlers and run times)."""
        with self._lock:
            counts = self._counts
            fields = self._fields
            for handler, seconds, ok in zip(handlers, durations, accepted, strict=True):
                if not ok:
                    continue
                names = fields.get(handler)
                if names is None:  # its buckets' fields, then "|us" and "|d": made once
                    names = fields[handler] = [f"{handler}|{i}" for i in range(
                        len(BUCKETS_MS) + 1)] + [handler + "|us", handler + "|d"]
                if seconds is None:
                    f = names[-1]
                    counts[f] = counts.get(f, 0) + 1
                    continue
                if seconds < 0.0:
                    seconds = 0.0
                f = names[bisect.bisect_left(BUCKETS_MS, seconds * 1000)]
                counts[f] = counts.get(f, 0) + 1
                f = names[-2]
                counts[f] = counts.get(f, 0) + int(seconds * 1_000_000)
            if counts and self._since is None:
                self._since = time.monotonic()

    def take_due(self) -> str:
        """The counts to send, if the oldest has waited TALLY_FLUSH_S (else ""): taken out,
        so the caller sends them or gives them back (put_back())."""
        with self._lock:
            if self._since is None or time.monotonic() - self._since < self.flush_s:
                return ""
            return self._take()

    def take(self) -> str:
        """Everything to send now (a worker stopping), "" if nothing."""
        with self._lock:
            return self._take()

    def _take(self) -> str:
        text = " ".join(f"{f} {n}" for f, n in self._counts.items())
        self._counts, self._since = {}, None
        return text

    def put_back(self, text: str) -> None:
        """Sending failed: the counts wait for the next call."""
        if not text:
            return
        with self._lock:
            for f, n in parse_tally(text):
                self._counts[f] = self._counts.get(f, 0) + n
            if self._since is None:
                self._since = time.monotonic()


def parse_tally(text: str) -> list[tuple[str, int]]:
    """The (field, increment) pairs of a tally's text; ValueError for anything else."""
    parts = text.split()
    if len(parts) % 2:
        raise ValueError(f"a tally is field/number pairs, got {text[:80]!r}")
    out = []
    for f, n in zip(parts[::2], parts[1::2], strict=True):
        if not _TALLY_FIELD.fullmatch(f) or not n.isdigit():
            raise ValueError(f"not a tally field and count: {f[:80]!r} {n[:20]!r}")
        out.append((f, int(n)))
    return out


@dataclass
class HandlerCounts:
    """One handler's counts over some time: a minute, an hour, or a sum of them."""

    done: int = 0
    failed: int = 0
    retried: int = 0
    run_us: int = 0  # summed run time of the timed runs done
    buckets: list[int] = field(default_factory=lambda: [0] * NBUCKETS)  # of the runs done
    fail_us: int = 0  # summed run time of the timed failed runs

    @property
    def runs(self) -> int:
        """Timed runs done (those in the histogram)."""
        return sum(self.buckets)

    @property
    def time_us(self) -> int:
        """Time spent: the timed runs, done or failed."""
        return self.run_us + self.fail_us

    @property
    def finished(self) -> int:
        return self.done + self.failed + self.retried

    @property
    def failure_rate(self) -> float:
        """Failed (dead-lettered) and retried runs among all that finished, 0..1."""
        n = self.finished
        return (self.failed + self.retried) / n if n else 0.0

    @property
    def mean_s(self) -> float | None:
        n = self.runs
        return self.run_us / n / 1e6 if n else None

    def add(self, other: HandlerCounts) -> None:
        self.done += other.done
        self.failed += other.failed
        self.retried += other.retried
        self.run_us += other.run_us
        self.fail_us += other.fail_us
        for i, n in enumerate(other.buckets[:NBUCKETS]):
            self.buckets[i] += n

    def minus(self, other: HandlerCounts) -> HandlerCounts:
        """The difference (what was added since `other` was read)."""
        return HandlerCounts(
            self.done - other.done, self.failed - other.failed, self.retried - other.retried,
            self.run_us - other.run_us,
            [a - b for a, b in zip(self.buckets, other.buckets, strict=True)],
            self.fail_us - other.fail_us,
        )

    def is_zero(self) -> bool:
        return not (self.done or self.failed or self.retried or self.run_us or self.fail_us
                    or any(self.buckets))

    def quantile(self, q: float) -> float | None:
        """The q-quantile of the run time in seconds, interpolated within its bucket as
        Prometheus' histogram_quantile() does; None without timed runs. Past the last finite
        bound it answers that bound (as Prometheus does)."""
        total = self.runs
        if not total:
            return None
        rank = q * total
        seen = 0
        for i, n in enumerate(self.buckets):
            if n and seen + n >= rank:
                if i >= len(BUCKETS_MS):
                    return BUCKETS_MS[-1] / 1000
                lo = BUCKETS_MS[i - 1] if i else 0.0
                hi = BUCKETS_MS[i]
                return (lo + (hi - lo) * (rank - seen) / n) / 1000
            seen += n
        return BUCKETS_MS[-1] / 1000


def parse(fields: dict[str, str]) -> dict[str, HandlerCounts]:
    """A minute's hash as handler -> counts (fields the layout does not know are ignored)."""
    out: dict[str, HandlerCounts] = {}
    for name, value in fields.items():
        handler, sep, f = name.rpartition("|")
        if not sep:
            continue
        c = out.get(handler)
        if c is None:
            c = out[handler] = HandlerCounts()
        n = int(value)
        if f == "d":
            c.done = n  # the untimed; the timed are added below
        elif f == "f":
            c.failed = n
        elif f == "r":
            c.retried = n
        elif f == "us":
            c.run_us = n
        elif f == "fus":
            c.fail_us = n
        elif f.isdecimal() and int(f) < NBUCKETS:
            c.buckets[int(f)] = n
    for c in out.values():
        c.done += c.runs
    return out


def merged(counts: Iterable[HandlerCounts]) -> HandlerCounts:
    total = HandlerCounts()
    for c in counts:
        total.add(c)
    return total

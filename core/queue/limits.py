"""Limits on keys (issue 37): a cap on how many tasks of a key are leased at once and/or how
many start per window, decided inside the lease (lua/_limits.lua). A key is the whole queue
(on="queue"), a handler, a tenant, a resource that requests declare at submit
(`resources=[...]`), or a field of the tasks' payloads (on="field", value=the field's name:
each value of the field is a key of its own, e.g. a limit per customer). Set and changed
live: the next dequeue reads them. A field limit counts from when it is set (the others
count what their key holds then), and its per-value sets expire a day after their last use.

The queue's hash `limits` holds each as "<on>|<value>|<rate>|<per_ms>|<concurrency>"; the
leases counted against it live in `lim:<name>:held` (concurrency) and `lim:<name>:starts`
(the rate's window), both keys of the queue (its hash tag).
"""

from __future__ import annotations

from .base import QueueBase, int_in
from .errors import InvalidInput
from .keys import validate_id
from .models import Limit

KINDS = ("queue", "handler", "tenant", "resource", "field")
MAX_WINDOW_MS = 86_400_000  # a rate's window: up to a day


def spec_of(limit: Limit) -> str:
    """The text the engine keeps for `limit` (validated)."""
    if limit.on not in KINDS:
        raise InvalidInput(f"a limit is on one of {', '.join(KINDS)}, not {limit.on!r}")
    if limit.on == "queue" and limit.value:
        raise InvalidInput("a limit on the queue names no value")
    if limit.on != "queue":
        validate_id(limit.value, f"{limit.on} name")
    if limit.rate is None and limit.concurrency is None:
        raise InvalidInput(f"limit {limit.name!r} sets neither a rate nor a concurrency")
    rate = "" if limit.rate is None else str(int_in(limit.rate, "rate", 1, 10**9))
    per = "" if limit.rate is None else str(int_in(limit.per_ms, "rate window (ms)", 1,
                                                   MAX_WINDOW_MS))
    conc = ("" if limit.concurrency is None
            else str(int_in(limit.concurrency, "concurrency", 1, 10**6)))
    return f"{limit.on}|{limit.value}|{rate}|{per}|{conc}"


def limit_of(name: str, spec: str) -> Limit | None:
    """A kept limit's text back as a Limit (None if it is not one)."""
    parts = spec.split("|")
    if len(parts) != 5:
        return None
    on, value, rate, per, conc = parts
    return Limit(name, on, value, rate=int(rate) if rate else None,
                 per_ms=int(per) if per else 1000, concurrency=int(conc) if conc else None)


class Limits(QueueBase):
    """Setting and removing a queue's limits; reading them with their use is
    core.queue.read.limits."""

    def set_limit(self, name: str, *, on: str, value: str = "", rate: int | None = None,
                  per: float = 1.0, concurrency: int | None = None) -> Limit:
        """Create or change the limit `name`: on "queue", or on the handler, tenant or
        resource `value`; at most `rate` tasks start per `per` seconds, and/or at most
        `concurrency` are leased at once (counting the key's tasks leased now). The next
        dequeue applies it."""
        validate_id(name, "limit name")
        limit = Limit(name, on, value, rate=rate, per_ms=round(per * 1000),
                      concurrency=concurrency)
        self._run("set_limit", [self._now(), name, spec_of(limit)],
                  [self.keys.limit_held(name), self.keys.limit_starts(name)])
        return limit

    def remove_limit(self, name: str) -> bool:
        """Remove the limit `name` (and what it counted); False if there was none."""
        validate_id(name, "limit name")
        return bool(self._run("set_limit", [self._now(), name, ""],
                              [self.keys.limit_held(name), self.keys.limit_starts(name)]))

"""Records that an application keeps beside a queue's requests: a small hash per id of one
kind (a data job's spec, plan, chunk reports and manifest: core.pipeline.jobs), with a life of
its own, and an index of the kind's ids by time, so that they are found without a scan. The
engine owns their keys (`<prefix>:{Q}:<kind>:<id>` and `<prefix>:{Q}:<kind>s`, under the
queue's hash tag): the application names a kind and an id, never a key.

Plain commands, no script: a record is written by one owner at a time (the submit, then the
job's own tasks); each call is one command, and its creation one transaction (MULTI), so that
it never exists without its expiry and its index entry. A record may also be created with a
request, in the same atomic call (Records.new(), Producer.submit_flow())."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .base import QueueBase, int_in, translated
from .errors import InvalidInput
from .keys import validate_id

Value = str | int | float
MAX_NEW_FIELDS = 1000  # a record made with a request: its fields go in one script call
MAX_KEEP_S = 10 * 366 * 86_400


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _value(field: object, v: object) -> str:
    """A field's value as Redis stores it (as redis-py writes it: floats by repr())."""
    if not isinstance(field, str):
        raise InvalidInput(f"a record's field names are text, got {field!r}")
    if isinstance(v, str):
        return v
    if isinstance(v, int | float) and not isinstance(v, bool):
        return repr(v)
    raise InvalidInput(f"record field {field!r}: a value is text or a number, got {v!r}")


@dataclass(frozen=True)
class NewRecord:
    """A record to create with a request, in the same atomic call (Producer.submit_flow):
    made by Records.new(), checked there. Its key names are the engine's (keys.py)."""

    key: str
    index: str
    record_id: str
    fields: tuple[str, ...]  # field, value, field, value, ...
    keep_s: int
    at_ms: int


class Records:
    """The records of one `kind` (e.g. "datajob") of a queue."""

    def __init__(self, q: QueueBase, kind: str) -> None:
        self.kind = validate_id(kind, "record kind")
        self._r: Any = q.redis
        self._keys = q.keys

    def _key(self, rid: str) -> str:
        return self._keys.record(self.kind, validate_id(rid, "record id"))

    def get(self, rid: str, field: str) -> str | None:
        with translated(f"{self.kind} record"):
            v = self._r.hget(self._key(rid), field)
        return None if v is None else _text(v)

    def get_many(self, rid: str, fields: Iterable[str]) -> dict[str, str | None]:
        names = list(fields)
        with translated(f"{self.kind} record"):
            values = self._r.hmget(self._key(rid), names)
        return {f: None if v is None else _text(v) for f, v in zip(names, values, strict=True)}

    def all(self, rid: str) -> dict[str, str]:
        """Every field of the record ({} when there is none)."""
        with translated(f"{self.kind} record"):
            got = self._r.hgetall(self._key(rid))
        return {_text(k): _text(v) for k, v in got.items()}

    def has(self, rid: str, field: str) -> bool:
        with translated(f"{self.kind} record"):
            return bool(self._r.hexists(self._key(rid), field))

    def exists(self, rid: str) -> bool:
        with translated(f"{self.kind} record"):
            return bool(self._r.exists(self._key(rid)))

    def put(self, rid: str, values: Mapping[str, Value]) -> None:
        if values:
            with translated(f"{self.kind} record"):
                self._r.hset(self._key(rid), mapping=dict(values))

    def create(self, rid: str, values: Mapping[str, Value], *, keep_s: int, at_ms: int) -> bool:
        """The record `rid` with `values`, kept `keep_s` seconds and indexed at `at_ms`, in one
        transaction (a crash cannot leave it without its expiry or its index entry). A record
        that exists keeps its fields and its place in the index (only its life is renewed);
        returns True when this call made it (decided by the first of `values`)."""
        key = self._key(rid)
        pipe = self._r.pipeline(transaction=True)
        for field, value in values.items():
            pipe.hsetnx(key, field, value)
        pipe.expire(key, keep_s)
        pipe.zadd(self._keys.record_index(self.kind), {rid: at_ms}, nx=True)
        with translated(f"{self.kind} record"):
            replies = pipe.execute()
        return bool(replies[0])

    def new(self, rid: str, values: Mapping[str, Value], *, keep_s: int,
            at_ms: int) -> NewRecord:
        """The record `rid` as Producer.submit_flow(record=...) creates it with its request:
        `values`, kept `keep_s` seconds, indexed at `at_ms`; it replaces a record of that id
        left by an earlier request of the same id. Nothing is written here."""
        if not values:
            raise InvalidInput("a new record needs at least one field")
        if len(values) > MAX_NEW_FIELDS:
            raise InvalidInput(f"a record made with a request has at most {MAX_NEW_FIELDS} "
                               f"fields, got {len(values)}")
        flat = tuple(x for f, v in values.items() for x in (f, _value(f, v)))
        return NewRecord(self._key(rid), self._keys.record_index(self.kind), rid, flat,
                         int_in(keep_s, "keep_s", 1, MAX_KEEP_S), int_in(at_ms, "at_ms", 0))

    def keep_for(self, rid: str, seconds: int) -> None:
        """The record expires `seconds` from now."""
        with translated(f"{self.kind} record"):
            self._r.expire(self._key(rid), seconds)

    def delete(self, rid: str) -> None:
        with translated(f"{self.kind} record"):
            self._r.delete(self._key(rid))

    # -- the index by time -----------------------------------------------------------------

    def indexed(self, start: int, stop: int) -> list[str]:
        """Ids by rank in the index, oldest first (`stop` inclusive, as ZRANGE)."""
        with translated(f"{self.kind} index"):
            return [_text(v) for v in self._r.zrange(self._keys.record_index(self.kind),
                                                     start, stop)]

    def indexed_since(self, since_ms: int, limit: int) -> list[tuple[str, int]]:
        """(id, time) of the index's entries at or after `since_ms`, oldest first, at most
        `limit`: what was created since a follower last looked (the mirror's data jobs)."""
        with translated(f"{self.kind} index"):
            got = self._r.zrangebyscore(self._keys.record_index(self.kind), since_ms, "+inf",
                                        start=0, num=int_in(limit, "limit", 1, 100_000),
                                        withscores=True)
        return [(_text(v), int(score)) for v, score in got]

    def unindex_before(self, before_ms: int) -> None:
        """Drop the index's entries older than `before_ms`."""
        with translated(f"{self.kind} index"):
            self._r.zremrangebyscore(self._keys.record_index(self.kind), "-inf", before_ms)

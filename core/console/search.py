"""Search: requests found by id, task id, tenant, handler, or words of their payloads and error
messages, through the database mirror (core.models.SearchDoc, kept by core.mirror.search);
never a Redis scan.

A query is split into words at ASCII punctuation and spaces (as the PostgreSQL column is built,
migration 0011), at most MAX_WORDS of them; a request matches when it has every word:
- PostgreSQL: full text, whole words, the last one also as a prefix as it is typed (`acme
  glob` finds acme's globex), on the GIN index of the generated `vector`; ranked by ts_rank
  (id, tenant, handler, task ids weigh most, then error messages, then payloads) while at most
  RANK_MAX requests match, newest first beyond.
- SQLite: each word anywhere in the text (LIKE, case-insensitive for ASCII letters), newest
  first: a scan, slower, with the same results for whole words.
Beside the text matches, `direct()` looks the query up as it is: a request id (exact, then
as a prefix), a task id (dead letters, and requests' first tasks), a tenant, a handler.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import reduce
from operator import and_, or_

from django.db import connections, router
from django.db.models import BooleanField, FloatField, Q, QuerySet
from django.db.models.expressions import RawSQL

from core.models import DeadLetter, Request, SearchDoc
from core.queue.errors import InvalidInput
from core.queue.keys import validate_task_id

from .paging import EPOCH, MICRO, PAGE_SIZE, Paged, keyset, successor
from .params import BadParam

MAX_LENGTH = 200  # characters of a query
MAX_WORDS = 8
RANK_MAX = 1000  # matches ranked by relevance; more are listed newest first
DIRECT_MAX = 10  # requests shown by id / task id
PREFIX_MIN = 3  # characters of the query's last word for it to match as a prefix too
# ASCII punctuation, controls and spaces: what separates words (migration 0011's SEPARATORS).
SEPARATORS = re.compile(r"[\x00-\x2f\x3a-\x40\x5b-\x60\x7b-\x7f\s]+")
SNIPPET = 60  # characters either side of a match


@dataclass(frozen=True)
class Query:
    text: str  # as typed, stripped
    words: tuple[str, ...]
    queue: str | None  # None: every queue

    @property
    def tsquery(self) -> str:
        """The words for to_tsquery('simple', ...), all required, each quoted (a word holds no
        ASCII punctuation, so no quote nor backslash): whole words, but the last one also as
        the start of a word if it has PREFIX_MIN characters or more, as typed. (A prefix reads
        every index entry that starts with it, and the index can no longer skip through a
        frequent word's entries with a rare word's: on 1,000,000 requests, a task id's words
        "<ms>" and "0" as prefixes took 0.7 s, as whole words 6 ms; docs/performance.md.)"""
        *whole, last = self.words
        tail = f"'{last}':*" if len(last) >= PREFIX_MIN else f"'{last}'"
        return " & ".join([*(f"'{w}'" for w in whole), tail])


def parse(text: str | None, queue: str | None = None) -> Query:
    """The query as typed (already stripped and checked for length and NUL by params.text)."""
    text = text or ""
    if len(text) > MAX_LENGTH:
        raise BadParam(f"The search is longer than {MAX_LENGTH} characters.")
    words = tuple(dict.fromkeys(w.lower() for w in SEPARATORS.split(text) if w))
    if len(words) > MAX_WORDS:
        raise BadParam(f"The search has {len(words)} words: at most {MAX_WORDS}, please.")
    return Query(text, words, queue)


def _postgres() -> bool:
    return connections[router.db_for_read(SearchDoc)].vendor == "postgresql"


# -- text matches -------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One request found by its text, with where the first word matched."""

    queue: str
    request_id: str
    created_at: dt.datetime
    row: Request | None  # None if the mirror has no Request row for it (it always should)
    where: str  # "payload", "error" or "id"
    before: str = ""
    match: str = ""
    after: str = ""


@dataclass(frozen=True)
class Found:
    hits: list[Hit]
    paged: Paged[SearchDoc]
    count: int  # matches, RANK_MAX + 1 meaning "more than RANK_MAX"
    ranked: bool


def _matching(query: Query) -> QuerySet[SearchDoc]:
    qs = SearchDoc.objects.all()
    if query.queue:
        qs = qs.filter(queue=query.queue)
    if _postgres():
        return qs.filter(RawSQL("vector @@ to_tsquery('simple', %s)", [query.tsquery],
                                output_field=BooleanField()))
    return qs.filter(reduce(and_, (
        Q(words__icontains=w) | Q(errors__icontains=w) | Q(payloads__icontains=w)
        for w in query.words
    )))


def count(query: Query) -> int:
    """How many requests match, counted up to RANK_MAX + 1."""
    return len(_matching(query).values_list("pk", flat=True)[: RANK_MAX + 1])


def text_matches(query: Query, after: str | None, limit: int = PAGE_SIZE) -> Found:
    """One page of the requests whose text has every word of the query: ranked (PostgreSQL,
    up to RANK_MAX matches) or newest first, by keyset. `after` is the cursor of the page
    before ("r<rank>:<time>:<pk>" ranked, "<time>:<pk>" newest first)."""
    if not query.words:
        return Found([], Paged([], None, True), 0, False)
    qs = _matching(query)
    if after is None:
        n = count(query)
        ranked = _postgres() and n <= RANK_MAX
    else:
        n = -1  # not counted again on later pages
        ranked = after.startswith("r")
    if ranked:
        cursor = _rank_cursor(after) if after else None
        if not _postgres():
            raise BadParam("This page cursor is for a ranked search, which needs PostgreSQL. "
                           "Start again from the first page.")
        paged = _ranked(qs, query, cursor, limit)
    else:
        paged = keyset(qs, "created_at", _time_cursor(after) if after else None, limit)
    return Found(_hits(query, paged.items), paged, n, ranked)


def _time_cursor(raw: str) -> tuple[dt.datetime, int]:
    micros, sep, pk = raw.partition(":")
    if not (sep and micros.isdecimal() and pk.isdecimal() and len(micros) <= 17
            and len(pk) <= 19):
        raise BadParam(f"Bad page cursor {raw[:100]!r}: expected <time>:<id>. "
                       "Start again from the first page.")
    try:
        return EPOCH + int(micros) * MICRO, int(pk)
    except (OverflowError, ValueError):
        raise BadParam(f"Bad page cursor {raw[:100]!r}: time out of range.") from None


def _rank_cursor(raw: str) -> tuple[float, dt.datetime, int]:
    rank, sep, rest = raw[1:].partition(":")
    try:
        value = float(rank)
    except ValueError:
        value = float("nan")
    if not sep or len(rank) > 30 or value != value or not 0 <= value <= 1e6:
        raise BadParam(f"Bad page cursor {raw[:100]!r}: expected r<rank>:<time>:<id>. "
                       "Start again from the first page.")
    at, pk = _time_cursor(rest)
    return value, at, pk


def _ranked(
    qs: QuerySet[SearchDoc], query: Query, after: tuple[float, dt.datetime, int] | None,
    limit: int,
) -> Paged[SearchDoc]:
    """Keyset paging on (rank, created_at, pk), best first. The rank is recomputed per page,
    as a double: one that goes through the cursor in its shortest exact form and comes back
    equal (a real would reach Python rounded to 8 digits, and equal nothing)."""
    qs = qs.annotate(rank=RawSQL("ts_rank(vector, to_tsquery('simple', %s))::float8",
                                 [query.tsquery], output_field=FloatField()))
    qs = qs.order_by("-rank", "-created_at", "-pk")
    if after is not None:
        rank, at, pk = after
        qs = qs.filter(Q(rank__lt=rank) | Q(rank=rank, created_at__lt=at)
                       | Q(rank=rank, created_at=at, pk__lt=pk))
    rows = list(qs[: limit + 1])
    nxt = None
    if len(rows) > limit:
        last = rows[limit - 1]
        score = float(getattr(last, "rank"))  # noqa: B009  (an annotation, unknown to mypy)
        nxt = f"r{score!r}:{(last.created_at - EPOCH) // MICRO}:{last.pk}"
    return Paged(rows[:limit], nxt, after is None)


def _hits(query: Query, docs: Sequence[SearchDoc]) -> list[Hit]:
    rows = {
        (r.queue, r.request_id): r
        for r in Request.objects.filter(request_id__in=[d.request_id for d in docs])
    }
    return [_hit(query, d, rows.get((d.queue, d.request_id))) for d in docs]


def _hit(query: Query, doc: SearchDoc, row: Request | None) -> Hit:
    for where, text in (("error", doc.errors), ("payload", doc.payloads), ("id", doc.words)):
        at = text.lower().find(query.words[0])
        if at >= 0:
            end = at + len(query.words[0])
            start = max(0, at - SNIPPET)
            before = ("…" if start else "") + text[start:at]
            after = text[end : end + SNIPPET] + ("…" if end + SNIPPET < len(text) else "")
            return Hit(doc.queue, doc.request_id, doc.created_at, row, where, before,
                       text[at:end], after)
    return Hit(doc.queue, doc.request_id, doc.created_at, row, "")


# -- direct matches: the query as an id, a task id, a tenant, a handler -------------------


@dataclass
class Direct:
    requests: list[Request] = field(default_factory=list)  # by id, exact first, then prefix
    tasks: list[tuple[str, str, str]] = field(default_factory=list)  # (queue, request, task)
    tenants: list[str] = field(default_factory=list)  # queues that have this tenant
    handlers: list[str] = field(default_factory=list)  # queues that have this handler

    def __bool__(self) -> bool:
        return bool(self.requests or self.tasks or self.tenants or self.handlers)


def direct(query: Query, queues: list[str]) -> Direct:
    """The query taken as one value: requests with it as id (exact, then prefix), the
    requests holding it as a task id, and the queues where it is a tenant or a handler. Each
    an index lookup; nothing for a query with spaces."""
    found = Direct()
    text = query.text
    if not text or any(c.isspace() for c in text) or len(text) > 128:
        return found
    scope = [query.queue] if query.queue else queues
    reqs = Request.objects.all()
    if query.queue:
        reqs = reqs.filter(queue=query.queue)
    exact = list(reqs.filter(request_id=text)[:DIRECT_MAX])
    upper = successor(text)
    prefix = reqs.filter(request_id__gt=text, request_id__startswith=text)
    if upper is not None:
        prefix = prefix.filter(request_id__lt=upper)
    found.requests = exact + list(prefix.order_by("request_id")[: DIRECT_MAX - len(exact)])
    try:
        task = validate_task_id(text)
    except InvalidInput:
        task = None
    if task is not None:
        found.tasks = _tasks(task, query.queue)
    for name in scope:
        if Request.objects.filter(queue=name, tenant=text).exists():
            found.tenants.append(name)
        if Request.objects.filter(queue=name, handler=text).exists():
            found.handlers.append(name)
    return found


def _tasks(task: str, queue: str | None) -> list[tuple[str, str, str]]:
    """(queue, request, task) of the requests that hold this task: among dead letters, and
    among the first tasks of each request (its search words)."""
    letters = DeadLetter.objects.filter(task_id=task)
    if queue:
        letters = letters.filter(queue=queue)
    out = dict.fromkeys((q, r, task) for q, r in letters.values_list("queue", "request_id")
                        .distinct()[:DIRECT_MAX])
    docs = SearchDoc.objects.all()
    if queue:
        docs = docs.filter(queue=queue)
    if _postgres():
        ms, _, seq = task.partition("-")
        docs = docs.filter(RawSQL("vector @@ to_tsquery('simple', %s)", [f"'{ms}':A & '{seq}':A"],
                                  output_field=BooleanField()))
    else:
        docs = docs.filter(reduce(or_, (Q(words__endswith=f" {task}"),
                                        Q(words__contains=f" {task} "))))
    for q, rid, words in docs.values_list("queue", "request_id", "words")[:100]:
        if task in words.split():
            out[(q, rid, task)] = None
    return list(out)[:DIRECT_MAX]

"""The search text of each mirrored request (core.models.SearchDoc), kept by the mirror: what
the console's search box matches, bounded per request.

A request's words (id, tenant, handler, task ids, unique key, trace id) come from its row and
events; its payload text from the events that brought its first tasks (the engine puts their
ids and up to 512 bytes of their payloads on its `submitted` or `added` event, see
append_tasks() in _common.lua; its unique key and trace context, if any, too), because a task
leaves Redis once done, often before the mirror reads the event; its error messages, and the
payloads of its dead tasks, from its dead letters. Each event or dead letter is folded in
once (`last_event_id`, `last_dead_id`), so replaying the streams changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.models import DeadLetter, Request, SearchDoc
from core.queue.follow import Entry, sid
from core.queue.tracehook import trace_id_of

from . import bulk

WORDS_MAX = 2000  # characters of a request's words (its id, tenant, handler, task ids)
PAYLOADS_MAX = 4000  # characters of payload text kept per request
ERRORS_MAX = 2000  # characters of error messages kept per request
ERROR_MAX = 500  # characters of one error message
TASK_EVENTS = ("submitted", "added")
FIELDS = ["created_at", "words", "payloads", "errors", "last_event_id", "last_dead_id"]
COLUMNS = ["queue", "request_id", *FIELDS]
KEY = ("queue", "request_id")


@dataclass(slots=True)
class Doc:
    """A search row being written (SearchDoc's FIELDS); `stored` if the table has it."""

    created_at: datetime
    words: str = ""
    payloads: str = ""
    errors: str = ""
    last_event_id: str = ""
    last_dead_id: str = ""
    stored: bool = False


def _docs(queue: str, rids: Sequence[str]) -> dict[str, Doc]:
    rows = bulk.select(SearchDoc, ["request_id", *FIELDS], {"queue": queue}, "request_id", rids)
    return {rid: Doc(created, words, payloads, errors, last_event, last_dead, stored=True)
            for rid, created, words, payloads, errors, last_event, last_dead in rows}


def _append(text: str, more: str, cap: int, sep: str = "\n") -> str:
    """`text` with `more` after it, if `more` is not in it already, cut at `cap` characters."""
    if not more or more in text or len(text) >= cap:
        return text
    return (f"{text}{sep}{more}" if text else more)[:cap]


def _words(old: str, *more: str) -> str:
    """The words column (id, tenant, handler, task ids, separated by spaces) with `more` in
    it: each word once, in the order first seen, capped."""
    words = old.split()
    seen = set(words)
    for word in more:
        for w in word.split():
            if w not in seen:
                seen.add(w)
                words.append(w)
    return " ".join(words)[:WORDS_MAX]


def _save(queue: str, docs: dict[str, Doc]) -> None:
    """New rows by COPY, changed ones by upsert. Another mirror group writing the same
    database may have made a row meanwhile: theirs is overwritten (both say the same)."""
    rows = {False: [], True: []}  # type: dict[bool, list[list[Any]]]
    for rid, d in docs.items():
        rows[d.stored].append([queue, rid, d.created_at, d.words, d.payloads, d.errors,
                               d.last_event_id, d.last_dead_id])
    bulk.insert(SearchDoc, COLUMNS, rows[False], key=KEY, update=FIELDS)
    bulk.upsert(SearchDoc, COLUMNS, rows[True], key=KEY, update=FIELDS)


def index_requests(
    queue: str, rows: dict[str, dict[str, Any]], events: dict[str, list[Entry]], *,
    every: bool = False,
) -> int:
    """Bring the search rows of these requests (request id -> its Request row's fields, as
    just written) up to date with their events; returns how many rows were written. Only the
    requests with tasks among their events are looked at (the others' rows are as they were),
    unless `every` (after a gap in the events, a request may have lost its `submitted`)."""
    rids = list(rows) if every else [
        rid for rid in rows if any(f.get("type") in TASK_EVENTS for _, f in events.get(rid, []))
    ]
    if not rids:
        return 0
    docs = _docs(queue, rids)
    out: dict[str, Doc] = {}
    for rid in rids:
        row = rows[rid]
        created: datetime = row["created_at"]
        doc = docs.get(rid) or Doc(created)
        after = sid(doc.last_event_id)
        fresh = [(eid, f) for eid, f in events.get(rid, [])
                 if f.get("type") in TASK_EVENTS and sid(eid) > after]
        ids = [tid for _, f in fresh for tid in f.get("ids", "").split()]
        ids += [f["key"] for _, f in fresh if f.get("key")]  # its unique key (issue 37)
        ids += [trace_id_of(f["tp"]) for _, f in fresh if f.get("tp")]  # trace id (issue 38)
        words = _words(doc.words, rid, row["tenant"], row["handler"], *ids)
        if doc.stored and not fresh and words == doc.words and doc.created_at == created:
            continue  # the usual case: a later event of a request already indexed
        doc.words, doc.created_at = words, created
        for eid, f in fresh:
            doc.payloads = _append(doc.payloads, f.get("text", ""), PAYLOADS_MAX)
            doc.last_event_id = max(doc.last_event_id, eid, key=sid)
        out[rid] = doc
    _save(queue, out)
    return len(out)


def index_letters(queue: str, letters: Sequence[DeadLetter]) -> int:
    """Fold new dead letters into their requests' search rows: the error message, the task's
    payload and id. A request without a row yet gets one (its Request row's time, else the
    letter's)."""
    by_request: dict[str, list[DeadLetter]] = {}
    for letter in letters:
        by_request.setdefault(letter.request_id, []).append(letter)
    if not by_request:
        return 0
    rids = list(by_request)
    docs = _docs(queue, rids)
    created = dict(bulk.select(Request, ["request_id", "created_at"], {"queue": queue},
                               "request_id", rids))
    out: dict[str, Doc] = {}
    for rid, mine in by_request.items():
        doc = docs.get(rid)
        if doc is None:
            first = mine[0]
            doc = Doc(created.get(rid) or min(x.dead_at for x in mine),
                      words=_words("", rid, first.tenant, first.handler))
        after = sid(doc.last_dead_id)
        fresh = [x for x in mine if sid(x.entry_id) > after]
        if not fresh:
            continue
        for x in fresh:
            doc.errors = _append(doc.errors, x.error[:ERROR_MAX], ERRORS_MAX)
            doc.payloads = _append(doc.payloads, x.payload[:ERROR_MAX], PAYLOADS_MAX)
            doc.last_dead_id = max(doc.last_dead_id, x.entry_id, key=sid)
        doc.words = _words(doc.words, *(x.task_id for x in fresh))
        out[rid] = doc
    _save(queue, out)
    return len(out)

"""The search text of each mirrored request (core.models.SearchDoc), kept by the mirror: what
the console's search box matches, bounded per request.

A request's words (id, tenant, handler, task ids) come from its row; its payload text from the
events that brought its first tasks (the engine puts their ids and up to 512 bytes of their
payloads on its `submitted` or `added` event, see append_tasks() in _common.lua), because a
task leaves Redis once done, often before the mirror reads the event; its error messages, and
the payloads of its dead tasks, from its dead letters. Each event or dead letter is folded in
once (`last_event_id`, `last_dead_id`), so replaying the streams changes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from core.models import DeadLetter, Request, SearchDoc
from core.queue.follow import Entry, sid

CHUNK = 500
WORDS_MAX = 2000  # characters of a request's words (its id, tenant, handler, task ids)
PAYLOADS_MAX = 4000  # characters of payload text kept per request
ERRORS_MAX = 2000  # characters of error messages kept per request
ERROR_MAX = 500  # characters of one error message
TASK_EVENTS = ("submitted", "added")
FIELDS = ["created_at", "words", "payloads", "errors", "last_event_id", "last_dead_id"]


def _docs(queue: str, rids: Sequence[str]) -> dict[str, SearchDoc]:
    out: dict[str, SearchDoc] = {}
    for i in range(0, len(rids), CHUNK):
        part = rids[i : i + CHUNK]
        out |= {d.request_id: d for d in SearchDoc.objects.filter(queue=queue,
                                                                   request_id__in=part)}
    return out


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


def _save(new: list[SearchDoc], changed: list[SearchDoc]) -> None:
    if new:
        # Another mirror group may have written the same request meanwhile: its row stands,
        # and the next event of the request brings this one's text to it.
        SearchDoc.objects.bulk_create(new, ignore_conflicts=True, batch_size=CHUNK)
    if changed:
        SearchDoc.objects.bulk_update(changed, FIELDS, batch_size=CHUNK)


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
    new: list[SearchDoc] = []
    changed: list[SearchDoc] = []
    for rid in rids:
        row = rows[rid]
        doc = docs.get(rid)
        fresh = [
            (eid, f) for eid, f in events.get(rid, [])
            if f.get("type") in TASK_EVENTS and (doc is None or sid(eid) > sid(doc.last_event_id))
        ]
        created: datetime = row["created_at"]
        if doc is None:
            doc = SearchDoc(queue=queue, request_id=rid, created_at=created)
            new.append(doc)
        ids = [tid for _, f in fresh for tid in f.get("ids", "").split()]
        words = _words(doc.words, rid, row["tenant"], row["handler"], *ids)
        if doc.pk is not None and not fresh and words == doc.words and doc.created_at == created:
            continue  # the usual case: a later event of a request already indexed
        doc.words, doc.created_at = words, created
        for eid, f in fresh:
            doc.payloads = _append(doc.payloads, f.get("text", ""), PAYLOADS_MAX)
            doc.last_event_id = max(doc.last_event_id, eid, key=sid)
        if doc.pk is not None:
            changed.append(doc)
    _save(new, changed)
    return len(new) + len(changed)


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
    created = dict(Request.objects.filter(queue=queue, request_id__in=rids)
                   .values_list("request_id", "created_at"))
    new: list[SearchDoc] = []
    changed: list[SearchDoc] = []
    for rid, mine in by_request.items():
        doc = docs.get(rid)
        if doc is None:
            first = mine[0]
            doc = SearchDoc(queue=queue, request_id=rid,
                            created_at=created.get(rid) or min(x.dead_at for x in mine),
                            words=_words("", rid, first.tenant, first.handler))
            new.append(doc)
        fresh = [x for x in mine if sid(x.entry_id) > sid(doc.last_dead_id)]
        if not fresh:
            continue
        for x in fresh:
            doc.errors = _append(doc.errors, x.error[:ERROR_MAX], ERRORS_MAX)
            doc.payloads = _append(doc.payloads, x.payload[:ERROR_MAX], PAYLOADS_MAX)
            doc.last_dead_id = max(doc.last_dead_id, x.entry_id, key=sid)
        doc.words = _words(doc.words, *(x.task_id for x in fresh))
        if doc.pk is not None:
            changed.append(doc)
    _save(new, changed)
    return len(new) + len(changed)

"""A request's results (issue 20): all of them, a page of them, or one task's whole."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ..base import QueueBase, int_in, translated
from ..errors import UnknownRequest
from ..keys import validate_id, validate_task_id
from .common import MAX_PAGE, redis_of

READ_AT_ONCE = 1000  # results read in one command; more are read in HSCAN pages of this size


def task_order(task_id: str) -> tuple[int, int]:
    """Task ids (stream entry ids "<ms>-<seq>") in the order their tasks were added."""
    ms, _, seq = task_id.partition("-")
    return (int(ms), int(seq)) if ms.isdecimal() and seq.isdecimal() else (-1, -1)


def all_results(q: QueueBase, request_id: str) -> dict[str, Any]:
    """The results of a request's finished tasks: task id -> value, in task order (what
    Queue.result() answers). UnknownRequest if the queue holds no such request."""
    rid = validate_id(request_id, "request id")
    key = q.keys.results(rid)
    r = redis_of(q)
    with translated("result"):
        pipe = r.pipeline(transaction=True)
        pipe.exists(q.keys.request(rid))
        pipe.hlen(key)
        exists, n = pipe.execute()
        if not exists:
            raise UnknownRequest(
                f"no request {rid!r} in queue {q.name!r} (never submitted, or its "
                "retention ended and its results with it)"
            )
        if n <= READ_AT_ONCE:
            raw: dict[str, str] = r.hgetall(key)
        else:  # a huge request: in pages, not one command that holds Redis for long
            raw = dict(r.hscan_iter(key, count=READ_AT_ONCE))
    return {tid: orjson.loads(raw[tid]) for tid in sorted(raw, key=task_order)}


@dataclass(frozen=True)
class ResultsPage:
    """Some of a request's results: (task id, JSON text) in task order within the page."""

    items: list[tuple[str, str]]
    cursor: int  # where the next page starts (pass it back); 0 after the last page
    total: int  # results the request keeps


MAX_RESULTS_CURSOR = 2**64 - 1


def results(q: QueueBase, request_id: str, *, cursor: int = 0, count: int = 50) -> ResultsPage:
    """A page of a request's results (results.py), about `count` of them: an HSCAN cursor
    over the request's own results hash, so a page costs its size however many it keeps.
    Pages follow the hash's order; a small request's results come as one page."""
    rid = validate_id(request_id, "request id")
    int_in(cursor, "results cursor", 0, MAX_RESULTS_CURSOR)
    int_in(count, "count", 1, MAX_PAGE)
    key = q.keys.results(rid)
    with translated("results"):
        pipe = redis_of(q).pipeline(transaction=False)
        pipe.hlen(key)
        pipe.hscan(key, cursor, count=count)
        total, (after, found) = pipe.execute()
    return ResultsPage(sorted(found.items(), key=lambda kv: task_order(kv[0])), int(after),
                       int(total))


def result_text(q: QueueBase, request_id: str, task_id: str) -> str | None:
    """One task's result as its JSON text, whole; None if it has none (yet, or any more)."""
    rid = validate_id(request_id, "request id")
    with translated("result"):
        text = redis_of(q).hget(q.keys.results(rid), validate_task_id(task_id))
    return None if text is None else str(text)

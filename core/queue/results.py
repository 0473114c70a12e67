"""Results (issue 20): a handler's return value, kept with its request, per task, for as long
as the request is kept (its retention). The ack that finishes the task writes it, in the same
atomic step (dequeue.lua), so a refused ack (a lost lease) keeps nothing and a redelivered
task's result replaces the earlier one. Results are small JSON values, capped like payloads:
large output belongs in the handler's own storage, and its result names where."""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from .base import MAX_RESULT_BYTES, QueueBase
from .errors import InvalidResult, ResultTooLarge
from .models import Lease
from .options import non_finite
from .read.results import all_results


class Completion(NamedTuple):
    """How a request ended, and its results by task id (wait(..., results=True))."""

    state: str
    results: dict[str, Any]


def encode_result(value: Any, limit: int = MAX_RESULT_BYTES) -> bytes | None:
    """A handler's return value as JSON, or None for None (no result: nothing is kept).
    InvalidResult if JSON cannot hold it, ResultTooLarge past `limit` bytes."""
    if value is None:
        return None
    try:
        text = orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise InvalidResult(
            f"the handler's result is not JSON-serialisable ({exc}); return a JSON value "
            "(dict, list, str, int, float, bool) or None"
        ) from exc
    if b"null" in text and (where := non_finite(value, "result")) is not None:
        raise InvalidResult(
            f"the handler's result holds NaN or Infinity at {where}, which JSON cannot carry "
            "(it would read back as null); return null or a string instead"
        )
    if len(text) > limit:
        raise ResultTooLarge(
            f"the handler's result is {len(text):,} bytes as JSON; the cap is {limit:,} bytes "
            "(max_result_bytes). Keep large output in the handler's own storage (a file, an "
            "object store, a table) and return a reference to it.",
            size=len(text), limit=limit,
        )
    return text


def lease_of(ack: str) -> str:
    """The lease token of an ack made by Results.ack_entry() (or of a plain token)."""
    return ack.partition(" ")[0]


class Results(QueueBase):
    """Keeps handlers' results with their acks, and reads them back."""

    def ack_entry(self, lease: Lease | str, result: Any) -> str:
        """What to acknowledge `lease` with so that its result is kept (the lease token alone
        when `result` is None): pass it to ack_and_dequeue() or ack_many() like a token.
        Raises InvalidResult or ResultTooLarge (over `max_result_bytes`) before anything is
        sent, so the caller can fail the task instead."""
        token = lease.lease if isinstance(lease, Lease) else lease
        text = encode_result(result, self.max_result_bytes)
        return token if text is None else f"{token} {text.decode()}"

    def result(self, request_id: str) -> dict[str, Any]:
        """The results of a request's finished tasks: task id -> value, in task order. Tasks
        that returned None, or are not finished, have none. UnknownRequest if the queue
        holds no such request (never submitted, or its retention ended: its results went
        with it)."""
        return all_results(self, request_id)

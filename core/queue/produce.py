"""Producing: submit a request with its tasks, or open one, add tasks and seal it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

import orjson

from .base import QueueBase, int_in
from .errors import InvalidInput, PayloadTooLarge, TotalMismatch, check_code
from .keys import validate_id
from .models import Submitted

DEFAULT_CONCURRENCY = 1_000_000  # no practical limit unless the request sets one
DEFAULT_PRIORITY = 50
SUBMIT_BATCH = 10_000  # tasks per script call: bounds how long one call holds Redis
DAY_MS = 86_400_000


def dumps(payload: Any) -> bytes:
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError as exc:
        raise InvalidInput(f"task payload is not JSON-serialisable: {exc}") from exc


class Producer(QueueBase):
    """Creates requests and their tasks."""

    def _encode(self, tasks: Iterable[Any]) -> list[bytes]:
        tasks = tasks if isinstance(tasks, list | tuple) else list(tasks)
        try:
            out = [orjson.dumps(task) for task in tasks]
        except orjson.JSONEncodeError:
            out = [dumps(task) for task in tasks]  # raises, naming the cause
        limit = self.max_payload_bytes
        for i, text in enumerate(out):
            if len(text) > limit:
                raise PayloadTooLarge(
                    f"task {i} payload is {len(text)} bytes; the limit is {limit}. "
                    "Put the data somewhere shared and send a reference to it.",
                    index=i,
                    size=len(text),
                )
        return out

    def submit(
        self,
        tasks: Iterable[Any],
        *,
        request_id: str | None = None,
        priority: int = DEFAULT_PRIORITY,
        concurrency: int = DEFAULT_CONCURRENCY,
        tenant: str = "default",
        handler: str = "echo",
        max_attempts: int = 3,
        lease_ms: int = 30_000,
        retention_ms: int = 7 * DAY_MS,
        backoff_ms: int = 1_000,
        backoff_max_ms: int = 300_000,
        seal: bool = True,
    ) -> Submitted:
        """Create a request with `tasks`; with seal=False more may be added, then seal().

        Idempotent on `request_id`: submitting an id that exists changes nothing and returns
        the existing request (created=False).
        """
        rid = validate_id(request_id, "request id") if request_id is not None else uuid.uuid4().hex
        meta = [
            int_in(priority, "priority", 0, 99),
            int_in(concurrency, "concurrency", 1),
            validate_id(tenant, "tenant"),
            validate_id(handler, "handler"),
            int_in(max_attempts, "max_attempts", 1, 1000),
            int_in(lease_ms, "lease_ms", 100),
            int_in(retention_ms, "retention_ms", 1000),
            int_in(backoff_ms, "backoff_ms", 0),
            int_in(backoff_max_ms, "backoff_max_ms", 0),
        ]
        payloads = self._encode(tasks)
        if seal and not payloads:
            raise InvalidInput("a request needs at least one task (or submit with seal=False)")
        mode = 1 if seal else 0
        if len(payloads) > SUBMIT_BATCH:
            mode = 2 if seal else 3  # too large for one call: the rest follows by add
        reply = self._run(
            "submit",
            [rid, self._now(), *meta, mode, *payloads[:SUBMIT_BATCH]],
            [self.keys.request(rid), self.keys.tasks(rid)],
        )
        created, state, total, resume = bool(reply[0]), str(reply[1]), int(reply[2]), int(reply[3])
        if (created and mode >= 2) or resume:
            # Append the rest, then seal if asked. A retry of a large submit that stopped
            # part-way resumes from the request's total, so it completes the request instead
            # of leaving it open with tasks missing; each batch appends only at its offset.
            total = self._append_from(rid, payloads, total)
            if (mode if created else resume) == 2:
                state = self.seal(rid)
        return Submitted(rid, created, state, total)

    def _append_from(self, rid: str, payloads: list[bytes], total: int) -> int:
        while total < len(payloads):
            batch = payloads[total : total + SUBMIT_BATCH]
            try:
                total = self._add(rid, batch, expect=total)
            except TotalMismatch:  # another retry of the same submit got there first
                total = int(self.redis.hget(self.keys.request(rid), "total") or 0)
        return total

    def open(self, *, request_id: str | None = None, **options: Any) -> Submitted:
        """Create a request that takes tasks by add() until seal()."""
        return self.submit([], request_id=request_id, seal=False, **options)

    def add(self, request_id: str, tasks: Iterable[Any]) -> int:
        """Append tasks to an open request; returns its new total."""
        rid = validate_id(request_id, "request id")
        payloads = self._encode(tasks)
        total = 0
        for i in range(0, len(payloads), SUBMIT_BATCH):
            total = self._add(rid, payloads[i : i + SUBMIT_BATCH])
        return total

    def _add(self, rid: str, payloads: list[bytes], *, expect: int | None = None) -> int:
        reply = self._run(
            "add",
            [rid, self._now(), "" if expect is None else expect, *payloads],
            [self.keys.request(rid), self.keys.tasks(rid)],
        )
        check_code(reply, f"add to request {rid!r}")
        return int(reply)

    def seal(self, request_id: str) -> str:
        """No more tasks will be added; returns the request's state."""
        rid = validate_id(request_id, "request id")
        reply = self._run("seal", [rid, self._now()], [self.keys.request(rid)])
        check_code(reply, f"seal request {rid!r}")
        return str(reply)

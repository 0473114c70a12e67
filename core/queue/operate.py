"""Operating: cancel a request, requeue dead letters, claim or release a pending task, read a
request's state and wait for its completion."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import orjson

from .base import QueueBase, translated
from .errors import UnknownRequest, check_code
from .keys import validate_id, validate_task_id
from .models import TERMINAL_STATES, Cancelled, Lease


class Operator(QueueBase):
    """What an operator (or the console) does to requests and tasks."""

    def cancel(self, request_id: str) -> Cancelled:
        """Stop a request: waiting tasks are dropped, running ones are told to stop."""
        rid = validate_id(request_id, "request id")
        reply = self._run(
            "cancel", [rid, self._now()], [self.keys.request(rid), self.keys.tasks(rid)]
        )
        check_code(reply, f"cancel request {rid!r}")
        return Cancelled(reply[0], int(reply[1]), int(reply[2]))

    def requeue(self, dead_ids: Sequence[str]) -> tuple[int, int]:
        """Put dead letters back to waiting by dead-stream id; returns (requeued, skipped)."""
        ids = [validate_task_id(d) for d in dead_ids]
        if not ids:
            return 0, 0
        reply = self._run("requeue", [self._now(), "ids", *ids])
        return int(reply[0]), int(reply[1])

    def requeue_request(self, request_id: str) -> int:
        """Put every dead letter of one request back to waiting; returns how many."""
        rid = validate_id(request_id, "request id")
        reply = self._run(
            "requeue", [self._now(), "request", rid], [self.keys.request(rid), self.keys.tasks(rid)]
        )
        check_code(reply, f"requeue request {rid!r}")
        return int(reply[0])

    def claim(self, request_id: str, task_id: str, consumer: str) -> Lease:
        """Move a leased task to `consumer`; the previous holder's lease stops being valid."""
        validate_id(consumer, "consumer name")
        reply = self._claim(request_id, task_id, consumer)
        return Lease(reply[1], int(reply[2]), orjson.loads(reply[3]), reply[4], int(reply[5]))

    def release_task(self, request_id: str, task_id: str) -> str:
        """Take a leased task from its holder and put it back to waiting; returns the holder."""
        return str(self._claim(request_id, task_id, "")[6])

    def _claim(self, request_id: str, task_id: str, consumer: str) -> Any:
        rid = validate_id(request_id, "request id")
        tid = validate_task_id(task_id)
        reply = self._run(
            "claim",
            [rid, self._now(), tid, consumer],
            [self.keys.request(rid), self.keys.tasks(rid)],
        )
        check_code(reply, f"task {tid} of request {rid!r}")
        return reply

    def state(self, request_id: str) -> str:
        """The request's state; raises UnknownRequest if there is no such request."""
        rid = validate_id(request_id, "request id")
        with translated("state"):
            state = self.redis.hget(self.keys.request(rid), "state")
        if state is None:
            raise UnknownRequest(f"no request {rid!r} in queue {self.name!r}")
        return str(state)

    def wait(self, request_id: str, timeout: float | None = None) -> str | None:
        """Block until the request completes; returns done, failed or cancelled, or None on
        timeout. A request that already completed returns at once."""
        rid = validate_id(request_id, "request id")
        deadline = None if timeout is None else time.monotonic() + timeout
        with translated("wait"):
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                # Subscribe before reading the state, so a completion in between is not missed.
                pubsub.subscribe(self.keys.done_channel(rid))
                while True:
                    state = self.state(rid)
                    if state in TERMINAL_STATES:
                        return state
                    left = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                    if left <= 0:
                        return None
                    msg = pubsub.get_message(timeout=left)
                    if msg and msg["data"] in TERMINAL_STATES:
                        return str(msg["data"])
            finally:
                pubsub.close()

"""Operating: cancel a request, requeue or delete dead letters, claim or release a pending
task, take back a dead worker's leases, pause and resume the queue, read a request's state and
wait for its completion."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Literal, overload

from .base import int_in, translated
from .errors import InvalidInput, UnknownRequest, check_code
from .keys import validate_id, validate_task_id
from .models import TERMINAL_STATES, Cancelled
from .results import Completion, Results

CHUNK = 1000  # ids per call into Redis: one call holds Redis for a few ms at most
WORKER_COMMANDS = ("quiet", "stop", "resume")


class Operator(Results):
    """What an operator (or the console) does to requests and tasks."""

    def cancel(self, request_id: str) -> Cancelled:
        """Stop a request: waiting tasks are dropped, running ones are told to stop."""
        rid = validate_id(request_id, "request id")
        reply = self._run(
            "cancel", [rid, self._now()], [self.keys.request(rid), self.keys.tasks(rid)]
        )
        check_code(reply, f"cancel request {rid!r}")
        return Cancelled(reply[0], int(reply[1]), int(reply[2]), int(reply[3]) == 1)

    def run_now(self, request_id: str) -> tuple[str, bool]:
        """Make a scheduled (delayed) request due now; returns (its state, whether this call
        changed it). A request that is not scheduled (due already, cancelled, finished) is
        left as it is."""
        rid = validate_id(request_id, "request id")
        reply = self._run("run_now", [rid, self._now()], [self.keys.request(rid)])
        check_code(reply, f"run request {rid!r} now")
        return str(reply[0]), int(reply[1]) == 1

    def requeue(self, dead_ids: Sequence[str]) -> tuple[int, int]:
        """Put dead letters back to waiting by dead-stream id; returns (requeued, skipped):
        a letter no longer dead (requeued or deleted meanwhile) is skipped, not requeued
        twice. One call into Redis per CHUNK ids."""
        return self._by_dead_id("requeue", dead_ids, "ids")

    def delete_dead(self, dead_ids: Sequence[str]) -> tuple[int, int]:
        """Remove dead letters for good, counted in their requests as discarded; returns
        (deleted, skipped): a letter no longer in the dead stream is skipped."""
        return self._by_dead_id("delete_dead", dead_ids)

    def _by_dead_id(self, op: str, dead_ids: Sequence[str], *mode: str) -> tuple[int, int]:
        ids = [validate_task_id(d) for d in dead_ids]
        done = skipped = 0
        for i in range(0, len(ids), CHUNK):
            reply = self._run(op, [self._now(), *mode, *ids[i : i + CHUNK]])
            done, skipped = done + int(reply[0]), skipped + int(reply[1])
        return done, skipped

    def requeue_request(self, request_id: str) -> int:
        """Put every dead letter of one request back to waiting; returns how many."""
        rid = validate_id(request_id, "request id")
        reply = self._run(
            "requeue", [self._now(), "request", rid], [self.keys.request(rid), self.keys.tasks(rid)]
        )
        check_code(reply, f"requeue request {rid!r}")
        return int(reply[0])

    def claim(
        self,
        request_id: str,
        task_id: str,
        consumer: str,
        *,
        expect_consumer: str | None = None,
        min_idle_ms: int = 0,
    ) -> str:
        """Take a leased task from its holder for `consumer`, without spending an attempt;
        returns the holder, whose lease stops being valid at once (it stops the run at its
        next check). The task is leased to `consumer` and pushed to its handoff list (a worker
        of that name takes it at its next dequeue or idle wait; leave_idle() returns it) once
        the old run is over: when the holder says it stopped, or its lease runs out (at once
        if it has); until then it counts against the request's concurrency, so it never runs
        twice at once (read.pending() shows until when at the latest: `moves_by_ms`).

        With `expect_consumer` and `min_idle_ms` (what an operator's page showed), the claim
        is refused with StateChanged if the task has another holder or was delivered again
        since (idle less than shown); NotLeased (a StateChanged) if it is no longer leased or
        was taken from its holder already.
        """
        validate_id(consumer, "consumer name")
        return str(self._claim(request_id, task_id, consumer, expect_consumer, min_idle_ms)[1])

    def release_task(
        self,
        request_id: str,
        task_id: str,
        *,
        expect_consumer: str | None = None,
        min_idle_ms: int = 0,
    ) -> str:
        """Take a leased task from its holder and put it back to waiting without spending an
        attempt; returns the holder. As with claim(), the task waits again once the old run is
        over (the holder said it stopped, or its lease ran out), counted against the request's
        concurrency until then. Refused as claim() is."""
        return str(self._claim(request_id, task_id, "", expect_consumer, min_idle_ms)[1])

    def _claim(
        self, request_id: str, task_id: str, consumer: str, expect: str | None, min_idle_ms: int
    ) -> Any:
        rid = validate_id(request_id, "request id")
        tid = validate_task_id(task_id)
        if expect is not None:
            validate_id(expect, "consumer name")
        int_in(min_idle_ms, "min_idle_ms", 0)
        reply = self._run(
            "claim",
            [rid, self._now(), tid, consumer, expect or "", min_idle_ms],
            [self.keys.request(rid), self.keys.tasks(rid)],
        )
        check_code(reply, f"task {tid} of request {rid!r}")
        return reply

    def reclaim_worker(self, worker: str, dead_after_ms: int = 0, *,
                       crashed: bool = False) -> tuple[int, int]:
        """Take back every lease of a dead worker without spending attempts, and remove it from
        the registry; returns (back to waiting, dropped as cancelled). Refused with
        StateChanged if it beat within `dead_after_ms` (0: the --dead-after its registry
        entry names), UnknownWorker if it is not registered.

        crashed=True: the worker's supervisor saw its process exit, so nothing of it runs: its
        leases are reaped now, each delivery counting as an attempt as the reaper counts an
        expired lease (a task that kills its worker ends in the dead letters), whatever its
        last beat; the first count is then what went back to waiting or the dead letters."""
        validate_id(worker, "worker name")
        int_in(dead_after_ms, "dead_after_ms", 0)
        released = cancelled = offset = 0
        keys = [self.keys.workers, self.keys.worker(worker)]
        mode = "crashed" if crashed else ""
        while offset >= 0:
            reply = self._run("reclaim", [self._now(), worker, dead_after_ms, CHUNK, offset,
                                          mode, 1 if self.metrics else 0], keys)
            check_code(reply, f"worker {worker!r}")
            released, cancelled = released + int(reply[0]), cancelled + int(reply[1])
            offset = int(reply[2])
        return released, cancelled

    def control_worker(self, worker: str, command: str, by: str = "") -> tuple[bool, str]:
        """Ask a registered worker to go "quiet" (take no new task, finish the running ones),
        "stop" (quiet, then exit) or "resume" (take work again after a quiet); it acts at its
        next heartbeat. Returns (whether this call changed the request, the worker's control
        now: "quiet", "stop" or ""). A stop is final: a later quiet or resume changes nothing.
        UnknownWorker if it is not registered in this queue."""
        validate_id(worker, "worker name")
        if command not in WORKER_COMMANDS:
            raise InvalidInput(f"a worker control is one of {', '.join(WORKER_COMMANDS)}, "
                               f"not {command!r}")
        reply = self._run("control", [self._now(), worker, command, by],
                          [self.keys.workers, self.keys.worker(worker)])
        check_code(reply, f"worker {worker!r} of queue {self.name!r}")
        return int(reply[0]) == 1, str(reply[1])

    def pause(self, by: str = "") -> bool:
        """Lease nothing from this queue until resume(); running tasks finish. Returns False
        if it was paused already."""
        return bool(self._run("pause", [self._now(), by], [self.keys.paused]))

    def resume(self, by: str = "") -> bool:
        """Hand out work again after pause(); returns False if the queue was not paused."""
        return bool(self._run("resume", [self._now(), by], [self.keys.paused]))

    def paused(self) -> bool:
        """Whether the queue is paused."""
        with translated("paused"):
            return bool(self.redis.exists(self.keys.paused))

    def state(self, request_id: str) -> str:
        """The request's state; raises UnknownRequest if there is no such request."""
        rid = validate_id(request_id, "request id")
        with translated("state"):
            state = self.redis.hget(self.keys.request(rid), "state")
        if state is None:
            raise UnknownRequest(f"no request {rid!r} in queue {self.name!r}")
        return str(state)

    @overload
    def wait(self, request_id: str, timeout: float | None = None, *,
             results: Literal[False] = False) -> str | None: ...

    @overload
    def wait(self, request_id: str, timeout: float | None = None, *,
             results: Literal[True]) -> Completion | None: ...

    def wait(self, request_id: str, timeout: float | None = None, *,
             results: bool = False) -> str | Completion | None:
        """Block until the request completes; returns done, failed or cancelled, or None on
        timeout. A request that already completed returns at once. With `results`, returns
        Completion(state, results by task id): results are stored before the completion is,
        so every finished task's is there."""
        state = self._wait(request_id, timeout)
        if state is None or not results:
            return state
        return Completion(state, self.result(request_id))

    def _wait(self, request_id: str, timeout: float | None) -> str | None:
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

    @contextlib.contextmanager
    def completions(self, request_ids: Sequence[str]) -> Iterator[Callable[[float], bool]]:
        """Listen for the completion announcements of these requests while the block runs:
        it gets a function that waits up to `timeout` s for one and says whether one came
        (any that came before are taken at once). Subscribed before the block starts, so a
        caller that reads the requests' state first misses none in between: a waiter that
        also reads other things (a data job's progress) wakes the moment a request ends
        instead of at its next poll."""
        channels = [self.keys.done_channel(validate_id(r, "request id")) for r in request_ids]
        with translated("completions"):
            pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(*channels)

                def wait(timeout: float) -> bool:
                    with translated("completions"):
                        came = pubsub.get_message(timeout=max(0.0, timeout)) is not None
                        while came and pubsub.get_message(timeout=0.0) is not None:
                            pass  # several at once: one wake-up
                    return came

                yield wait
            finally:
                pubsub.close()


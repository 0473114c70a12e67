"""Consuming: lease tasks, acknowledge, fail, renew and release them; idle handoff; the
worker registry."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, TypeVar

import orjson

from .base import int_in, leases_from_handoff, leases_from_reply, translated
from .errors import InvalidInput, LeaseLost
from .keys import validate_id
from .metrics import Tally
from .metrics import token as timing_token
from .metrics import tokens as timing_tokens
from .models import FailOutcome, Lease, Reaped
from .results import Results, lease_of

MAX_LEASE_MS = 86_400_000  # a day: a worker that needs longer renews
# Progress reports (progress.lua keeps the last LOG_LINES lines of at most 64 tasks per
# request): longer text is cut here, in characters, so the engine never splits a character.
MAX_MESSAGE_CHARS = 200
MAX_LINE_CHARS = 300
LOG_LINES = 20
# How long a worker stopped by an operator stays marked so once it has exited: its supervisor
# reads it when the process exits (seconds later at most), and the console lists it as
# stopped until its stack restarts (prune.forget_stopped), a week at most.
STOPPED_KEPT_MS = 7 * 86_400_000


def check_lease_ms(lease_ms: object) -> int:
    """A worker-chosen lease length: 0 (each request's own) or 100 ms to a day."""
    if lease_ms == 0 and isinstance(lease_ms, int):
        return 0
    return int_in(lease_ms, "lease_ms", 100, MAX_LEASE_MS)


class Consumer(Results):
    """Leases and finishes tasks; registers workers."""

    def ack_and_dequeue(
        self,
        consumer: str,
        count: int,
        acks: Sequence[str] = (),
        *,
        lease_ms: int = 0,
        idle_handoff: bool = False,
        durations: Sequence[float | None] | None = None,
        tally: Tally | None = None,
        handlers: Sequence[str] = (),
        runs: str = "",
    ) -> tuple[list[bool], list[Lease], int]:
        """Acknowledge `acks`, then lease up to `count` tasks: one round trip.

        `runs`: the handlers this consumer runs, separated by spaces ("" = any): only their
        tasks are leased to it (also by handoff while it is idle); see runs_text().

        `durations`: how long each acked task ran (seconds, in the order of `acks`; None for
        one not timed), for its handler's metrics; an accepted ack counts as done there.
        With a `tally` (a worker's) and the acks' `handlers`, the accepted acks are counted
        in it instead, and the call carries what the tally has kept for a second or more
        (core/queue/metrics.py): one-task acks then write nothing more than the ack.
        `lease_ms` (0: each request's own) is how long the leases last unless renewed. With
        `idle_handoff`, a call that leases nothing registers the consumer as idle: work that
        arrives while nothing else waits is then leased to it at once and pushed to its
        handoff list, which wait_for_any(..., consumer=...) returns (the consumer must then
        block there, and call leave_idle() when it stops).
        Each of `acks` is a lease token, or an ack_entry() that carries the task's result.
        Returns (accepted flag per ack, new leases, ms until the next delayed task is due or
        -1; the last only when nothing was leased).
        """
        validate_id(consumer, "consumer name")  # "~waiting" & co. are the engine's own
        int_in(count, "count", 0, 1000)
        check_lease_ms(lease_ms)
        if tally is None or not self.metrics:
            return self._dequeue_call(consumer, count, acks, lease_ms, idle_handoff, durations,
                                      runs=runs)
        if len(handlers) != len(acks) or durations is None or len(durations) != len(acks):
            raise InvalidInput(f"{len(acks)} acks need as many handlers and durations, got "
                               f"{len(handlers)} and {len(durations or ())}")
        counts = tally.take_due()
        try:
            reply = self._dequeue_call(consumer, count, acks, lease_ms, idle_handoff,
                                       tallied=counts, runs=runs)
        except BaseException:
            # The call may not have run: counted with the next one (if it ran and only its
            # reply was lost, they count twice: a second of a handler's counts, never a task).
            tally.put_back(counts)
            raise
        tally.add(handlers, durations, reply[0])
        return reply

    def send_tally(self, tally: Tally, *, force: bool = False) -> None:
        """Send what a worker's tally has held for a second (all it holds with `force`: a
        worker stopping), if anything; no round trip when there is nothing to send."""
        counts = tally.take() if force else tally.take_due()
        if counts and self.metrics:
            try:
                self._dequeue_call("-", 0, (), 0, False, tallied=counts)
            except BaseException:
                tally.put_back(counts)
                raise

    def _dequeue_call(
        self, consumer: str, count: int, acks: Sequence[str], lease_ms: int, idle: bool,
        durations: Sequence[float | None] | None = None, *, tallied: str | None = None,
        runs: str = "",
    ) -> tuple[list[bool], list[Lease], int]:
        if tallied is not None:  # the acks' times go to the tally, not as tokens
            timings = ""
        else:
            tallied = ""
            timings = timing_tokens(len(acks), durations) if self.metrics and acks else ""
        reply = self._run("dequeue", [self._now(), consumer, count, lease_ms, 1 if idle else 0,
                                      timings, tallied, runs, *acks])
        traces = reply[3] if len(reply) > 3 else None  # issue 38: only with trace contexts
        return [r == 1 for r in reply[0]], leases_from_reply(reply[2], traces), int(reply[1])

    def dequeue(self, consumer: str, count: int = 1, *,
                handlers: Sequence[str] | None = None) -> list[Lease]:
        """Lease up to `count` tasks to `consumer` (highest priority first, fair within); with
        `handlers`, only tasks of those handlers (the ones this consumer runs)."""
        validate_id(consumer, "consumer name")
        runs = "" if handlers is None else runs_text(handlers)
        return self.ack_and_dequeue(consumer, int_in(count, "count", 1, 1000), runs=runs)[1]

    def ack(self, lease: Lease | str, result: Any = None, *,
            duration: float | None = None) -> None:
        """Mark a leased task done, keeping `result` (JSON; None keeps nothing) with its
        request (it ran `duration` seconds, if given, for its handler's metrics); raises
        LeaseLost if the lease is no longer held (then nothing is kept), and InvalidResult or
        ResultTooLarge before anything is sent."""
        token = self.ack_entry(lease, result)
        if not self._dequeue_call("-", 0, [token], 0, False, [duration])[0][0]:
            raise LeaseLost(f"lease {lease_of(token)} is no longer held")

    def ack_many(
        self, leases: Sequence[Lease | str], results: Sequence[Any] | None = None, *,
        durations: Sequence[float | None] | None = None,
    ) -> list[bool]:
        """Mark several tasks done, with their `results` if given (one per lease, None for
        none; `durations`: their run times in seconds, for the metrics); returns, per lease,
        whether it was still held."""
        if results is None:
            tokens = [x.lease if isinstance(x, Lease) else x for x in leases]
        elif len(results) != len(leases):
            raise InvalidInput(f"{len(leases)} leases but {len(results)} results")
        else:
            tokens = [self.ack_entry(x, r) for x, r in zip(leases, results, strict=True)]
        if durations is not None and len(durations) != len(tokens):
            raise InvalidInput(f"{len(durations)} durations for {len(tokens)} leases")
        out: list[bool] = []
        for i in range(0, len(tokens), 1000):  # Lua's unpack() has a limit
            part = None if durations is None else durations[i : i + 1000]
            out += self._dequeue_call("-", 0, tokens[i : i + 1000], 0, False, part)[0]
        return out

    def fail(
        self,
        lease: Lease | str,
        error: str,
        traceback: str = "",
        *,
        worker: str = "",
        retry: bool = True,
        duration: float | None = None,
    ) -> FailOutcome:
        """A task failed: retry it after a backoff, or dead-letter it when out of attempts.
        `duration`: how long the run took (seconds), for its handler's metrics."""
        token = lease.lease if isinstance(lease, Lease) else lease
        reply = self._run(
            "fail",
            [self._now(), token, error, traceback, worker, random.random(), 1 if retry else 0,
             timing_token(duration) if self.metrics else ""],
        )
        if isinstance(reply, int):
            raise LeaseLost(f"lease {token} is no longer held")
        return FailOutcome(reply[1], int(reply[2]), int(reply[3]))

    def extend(self, leases: Sequence[Lease | str], lease_ms: int = 0) -> list[int]:
        """Renew leases; per lease 1 renewed, 2 renewed but cancelled (stop it), -1 lost."""
        check_lease_ms(lease_ms)
        tokens = [x.lease if isinstance(x, Lease) else x for x in leases]
        if not tokens:
            return []
        return [int(r) for r in self._run("extend", [self._now(), lease_ms, "", 0, "", *tokens])]

    def progress(
        self,
        lease: Lease | str,
        *,
        done: float | None = None,
        total: float | None = None,
        message: str = "",
        lines: Sequence[tuple[int, str]] = (),
        worker: str = "",
    ) -> bool:
        """Record how far a leased task is (`done` of `total`, with `message`) and/or log
        `lines` ((age in ms, text), oldest first), kept with its request until the request
        expires. Returns False, writing nothing, when the lease is no longer held."""
        token = lease.lease if isinstance(lease, Lease) else lease
        reply = self._run("progress", [
            self._now(), token, worker,
            "" if done is None else progress_number(done, "done"),
            "" if total is None or done is None else progress_number(total, "total"),
            _cut(message, MAX_MESSAGE_CHARS),
            orjson.dumps([[max(0, int(age)), _cut(text, MAX_LINE_CHARS)]
                          for age, text in lines[-LOG_LINES:]]).decode() if lines else "",
        ])
        if reply == -9:
            raise InvalidInput(f"progress of {token}: refused by the engine (invalid numbers)")
        return bool(reply == 1)

    def release(self, leases: Sequence[Lease | str]) -> list[int]:
        """Give leases back unfinished, not counted as an attempt.

        Per lease: 1 back to waiting, 2 dropped (request cancelled), -1 not held. Releasing a
        lease an operator took away (claim, release_task) says its run stopped: the task,
        kept from running again meanwhile, moves on now.
        """
        tokens = [x.lease if isinstance(x, Lease) else x for x in leases]
        if not tokens:
            return []
        return [int(r) for r in self._run("release", [self._now(), *tokens])]

    def reap(self, limit: int = 1000) -> list[Reaped]:
        """Return expired leases to waiting (or dead letters when out of attempts)."""
        flat = self._run("reap", [self._now(), limit, 1 if self.metrics else 0])
        return [Reaped(*flat[i : i + 4]) for i in range(0, len(flat), 4)]

    def wait_for_work(self, timeout: float) -> bool:
        """Block until a producer signals new work or `timeout` seconds pass."""
        with translated("wait_for_work"):
            return self.redis.blpop([self.keys.wake], timeout=max(timeout, 0.001)) is not None

    def heartbeat(
        self,
        worker: str,
        info: dict[str, Any],
        leases: Sequence[Lease | str] = (),
        *,
        ttl_ms: int = 60_000,
        lease_ms: int = 0,
    ) -> list[int]:
        """Record that `worker` lives (with `info`) and renew its leases, in one round trip.

        `lease_ms` (0: each request's own) is the renewed lease length. Returns per lease
        what extend() returns.
        """
        validate_id(worker, "worker name")
        check_lease_ms(lease_ms)
        tokens = [x.lease if isinstance(x, Lease) else x for x in leases]
        reply = self._run(
            "extend",
            [self._now(), lease_ms, worker, ttl_ms, orjson.dumps(info, default=str), *tokens],
        )
        return [int(r) for r in reply]

    def try_reaper_lock(self, worker: str, ttl_ms: int) -> bool:
        """Take the queue's reaper lock for `ttl_ms` unless another worker holds it."""
        with translated("reaper lock"):
            return bool(self.redis.set(self.keys.reaper_lock, worker, nx=True, px=ttl_ms))

    def leave_idle(self, consumer: str, lease_ms: int = 0, runs: str = "") -> list[Lease]:
        """Stop being offered handoffs; returns tasks already handed over and not taken, which
        the caller must run or release. `lease_ms` and `runs` as its dequeues passed them."""
        with translated("leave_idle"):
            self.redis.zrem(self.keys.idle,
                            f"{consumer}|{lease_ms}" + (f"|{runs}" if runs else ""))
            # After the ZREM no dispatch pushes here any more (only an operator's claim for
            # this consumer could), so this drains it.
            # No call chaining: a cluster pipeline's delete() returns None (redis-py 8).
            pipe = self.redis.pipeline(transaction=True)
            pipe.lrange(self.keys.handoff(consumer), 0, -1)
            pipe.delete(self.keys.handoff(consumer))
            items, _ = pipe.execute()
        return [lease for item in items for lease in leases_from_handoff(item)]

    def unregister(self, worker: str, *, stopped: bool = False) -> None:
        """Remove a worker from the registry (on clean exit). stopped=True: it exits because
        an operator stopped it (control_worker): its entry is left, out of the registry, with
        its last info, {control: stop}, who asked and when, and when it exited (stopped_ms),
        for STOPPED_KEPT_MS, so that its supervisor does not start it again (worker_control()
        says "stop") and the console lists it as stopped (keys.stopped_workers)."""
        now = self.now_ms() if stopped else 0
        with translated("unregister"):
            key = self.keys.worker(worker)
            runs = str(self.redis.hget(key, "handlers") or "").split()
            pipe = self.redis.pipeline(transaction=stopped)
            if runs:  # its announcement ends with it (handlers.py)
                pipe.zrem(self.keys.handlers, *(f"{n}|{worker}" for n in runs))
            pipe.zrem(self.keys.workers, worker)
            if stopped:
                pipe.hset(key, mapping={"control": "stop", "stopped_ms": now})
                pipe.pexpire(key, STOPPED_KEPT_MS)
                pipe.zadd(self.keys.stopped_workers, {worker: now})
            else:
                pipe.delete(key)
            pipe.execute()

    def forget_control(self, worker: str) -> None:
        """Drop what an operator asked of an earlier process of this name (a quiet it did not
        live to see resumed, a stop it obeyed): a worker calls it as it starts."""
        with translated("forget control"):
            pipe = self.redis.pipeline(transaction=False)
            pipe.hdel(self.keys.worker(worker), "control", "control_by", "control_ms",
                      "stopped_ms")
            pipe.zrem(self.keys.stopped_workers, worker)
            pipe.execute()

    def worker_control(self, worker: str) -> str:
        """What an operator asked of `worker` (Operator.control_worker): "quiet", "stop" or
        "" (nothing, or resumed). Read by the worker at every heartbeat, and by a supervisor
        deciding whether to start an exited worker again."""
        with translated("worker control"):
            return str(self.redis.hget(self.keys.worker(worker), "control") or "")


def runs_text(names: Sequence[str] | set[str]) -> str:
    """The `runs` of ack_and_dequeue() for a consumer that runs the handlers `names`. A
    consumer with none is given nothing (a name no handler can have), not everything."""
    valid = sorted({validate_id(n, "handler name") for n in names})
    return " ".join(valid) if valid else "~none"


def progress_number(value: object, name: str) -> str:
    """A progress count as JSON text the engine accepts: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            0 <= value < 1e18):
        raise InvalidInput(f"progress {name} must be a number from 0 (below 1e18), "
                           f"got {value!r}")
    if isinstance(value, int) or value.is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _cut(text: object, limit: int) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


C = TypeVar("C", bound="Consumer")


def wait_for_any(
    queues: Sequence[C], timeout: float, consumer: str | None = None
) -> tuple[C, list[Lease]] | None:
    """Block until any queue has work or `timeout` seconds pass (None).

    Returns (queue, tasks handed to `consumer`) after a handoff, or (queue, []) after a plain
    wake-up, when the caller should dequeue. One BLPOP over every list where the queues share
    one server; on a cluster their keys live in different slots, so each gets a share of the
    time instead.
    """
    client = queues[0].redis
    if len(queues) > 1 and (
        hasattr(client, "nodes_manager") or any(q.redis is not client for q in queues)
    ):
        share = max(timeout / len(queues), 0.01)
        for q in queues:
            if (got := wait_for_any([q], share, consumer)) is not None:
                return got
        return None
    lists: dict[str, tuple[C, bool]] = {}
    if consumer is not None:
        lists |= {q.keys.handoff(consumer): (q, True) for q in queues}
    lists |= {q.keys.wake: (q, False) for q in queues}
    with translated("wait_for_work"):
        reply = client.blpop(list(lists), timeout=max(timeout, 0.001))
    if reply is None:
        return None
    q, handed = lists[reply[0]]
    return q, leases_from_handoff(reply[1]) if handed else []

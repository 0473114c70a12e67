"""The queue client: producers submit requests, consumers lease and finish tasks.

Plain Python on redis-py; usable without Django. Every state change is one Lua script
(see lua/), so a crash between two calls never loses a task.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
import redis

from .errors import (
    InvalidInput,
    LeaseLost,
    PayloadTooLarge,
    QueueError,
    RedisUnavailable,
    TotalMismatch,
    UnknownRequest,
    check_code,
)
from .keys import QueueKeys, validate_id, validate_task_id
from .models import (
    TERMINAL_STATES,
    Cancelled,
    FailOutcome,
    Lease,
    Reaped,
    Submitted,
)
from .scripts import SCRIPT_NAMES, source

DEFAULT_CONCURRENCY = 1_000_000  # no practical limit unless the request sets one
DEFAULT_PRIORITY = 50
MAX_PAYLOAD_BYTES = 64 * 1024
SUBMIT_BATCH = 10_000  # tasks per script call: bounds how long one call holds Redis
DAY_MS = 86_400_000


def _dumps(payload: Any) -> bytes:
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError as exc:
        raise InvalidInput(f"task payload is not JSON-serialisable: {exc}") from exc


def _int_in(value: object, name: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidInput(f"{name} must be {bounds}, got {value}")
    return value


@contextmanager
def _translated(op: str) -> Iterator[None]:
    """Redis errors leave the engine as QueueError subclasses, with the cause chained."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(f"{op}: Redis is unreachable ({exc})") from exc
    except redis.ResponseError as exc:
        raise QueueError(f"{op}: Redis refused the operation ({exc})") from exc


class Queue:
    """One named queue on one Redis (or Redis Cluster: all its keys share one hash tag)."""

    def __init__(
        self,
        client: redis.Redis,
        name: str = "default",
        *,
        prefix: str = "qa",
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if not client.get_connection_kwargs().get("decode_responses"):
            raise InvalidInput("the Redis client must be made with decode_responses=True")
        self.redis: Any = client
        self.name = name
        self.keys = QueueKeys(prefix, name)
        self.max_payload_bytes = max_payload_bytes
        # None: scripts read the Redis server's clock, so hosts with skewed clocks agree.
        self._clock = clock
        self._qkeys = self.keys.script_keys
        self._scripts = {n: client.register_script(source(n)) for n in SCRIPT_NAMES}

    @classmethod
    def from_url(cls, url: str, name: str = "default", **kwargs: Any) -> Queue:
        """A queue on the Redis at `url` (redis://, rediss:// or unix://)."""
        client = redis.Redis.from_url(url, decode_responses=True)
        return cls(client, name, **kwargs)

    def __repr__(self) -> str:
        return f"<Queue {self.keys.base!r}>"

    # -- helpers ------------------------------------------------------------------------

    def _now(self) -> int:
        return self._clock() if self._clock else 0

    def now_ms(self) -> int:
        """The time scripts use: the injected clock, else the Redis server's."""
        if self._clock:
            return self._clock()
        with _translated("time"):
            sec, usec = self.redis.time()
        return int(sec) * 1000 + int(usec) // 1000

    def _run(self, name: str, args: Sequence[Any], extra_keys: Sequence[str] = ()) -> Any:
        with _translated(name):
            return self._scripts[name](keys=[*self._qkeys, *extra_keys], args=args)

    def _encode(self, tasks: Iterable[Any]) -> list[bytes]:
        tasks = tasks if isinstance(tasks, list | tuple) else list(tasks)
        try:
            out = [orjson.dumps(task) for task in tasks]
        except orjson.JSONEncodeError:
            out = [_dumps(task) for task in tasks]  # raises, naming the cause
        limit = self.max_payload_bytes
        for i, text in enumerate(out):
            if len(text) > limit:
                raise PayloadTooLarge(
                    f"task {i} payload is {len(text)} bytes; the limit is {limit}. "
                    "Put the data somewhere shared and send a reference to it.",
                    index=i, size=len(text),
                )
        return out

    # -- producing ----------------------------------------------------------------------

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
            _int_in(priority, "priority", 0, 99),
            _int_in(concurrency, "concurrency", 1),
            validate_id(tenant, "tenant"),
            validate_id(handler, "handler"),
            _int_in(max_attempts, "max_attempts", 1, 1000),
            _int_in(lease_ms, "lease_ms", 100),
            _int_in(retention_ms, "retention_ms", 1000),
            _int_in(backoff_ms, "backoff_ms", 0),
            _int_in(backoff_max_ms, "backoff_max_ms", 0),
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

    # -- consuming ----------------------------------------------------------------------

    def ack_and_dequeue(
        self,
        consumer: str,
        count: int,
        acks: Sequence[str] = (),
        *,
        lease_ms: int = 0,
        idle_handoff: bool = False,
    ) -> tuple[list[bool], list[Lease], int]:
        """Acknowledge `acks`, then lease up to `count` tasks: one round trip.

        `lease_ms` (0: each request's own) is how long the leases last unless renewed. With
        `idle_handoff`, a call that leases nothing registers the consumer as idle: work that
        arrives while nothing else waits is then leased to it at once and pushed to its
        handoff list, which wait_for_any(..., consumer=...) returns (the consumer must then
        block there, and call leave_idle() when it stops).
        Returns (accepted flag per ack, new leases, ms until the next delayed task is due or
        -1; the last only when nothing was leased).
        """
        reply = self._run(
            "dequeue", [self._now(), consumer, count, lease_ms, 1 if idle_handoff else 0, *acks]
        )
        return [r == 1 for r in reply[0]], _leases(reply[2]), int(reply[1])

    def dequeue(self, consumer: str, count: int = 1) -> list[Lease]:
        """Lease up to `count` tasks to `consumer` (highest priority first, fair within)."""
        validate_id(consumer, "consumer name")
        return self.ack_and_dequeue(consumer, _int_in(count, "count", 1, 1000))[1]

    def ack(self, lease: Lease | str) -> None:
        """Mark a leased task done; raises LeaseLost if the lease is no longer held."""
        token = lease.lease if isinstance(lease, Lease) else lease
        if not self.ack_and_dequeue("-", 0, [token])[0][0]:
            raise LeaseLost(f"lease {token} is no longer held")

    def ack_many(self, leases: Sequence[Lease | str]) -> list[bool]:
        """Mark several tasks done; returns, per lease, whether it was still held."""
        tokens = [x.lease if isinstance(x, Lease) else x for x in leases]
        out: list[bool] = []
        for i in range(0, len(tokens), 1000):  # Lua's unpack() has a limit
            out += self.ack_and_dequeue("-", 0, tokens[i : i + 1000])[0]
        return out

    def fail(
        self,
        lease: Lease | str,
        error: str,
        traceback: str = "",
        *,
        worker: str = "",
        retry: bool = True,
    ) -> FailOutcome:
        """A task failed: retry it after a backoff, or dead-letter it when out of attempts."""
        token = lease.lease if isinstance(lease, Lease) else lease
        reply = self._run(
            "fail",
            [self._now(), token, error, traceback, worker, random.random(), 1 if retry else 0],
        )
        if isinstance(reply, int):
            raise LeaseLost(f"lease {token} is no longer held")
        return FailOutcome(reply[1], int(reply[2]), int(reply[3]))

    def extend(self, leases: Sequence[Lease | str], lease_ms: int = 0) -> list[int]:
        """Renew leases; per lease 1 renewed, 2 renewed but cancelled (stop it), -1 lost."""
        tokens = [x.lease if isinstance(x, Lease) else x for x in leases]
        if not tokens:
            return []
        return [int(r) for r in self._run("extend", [self._now(), lease_ms, "", 0, "", *tokens])]

    def release(self, leases: Sequence[Lease | str]) -> list[int]:
        """Give leases back unfinished, not counted as an attempt.

        Per lease: 1 back to waiting, 2 dropped (request cancelled), -1 not held.
        """
        tokens = [x.lease if isinstance(x, Lease) else x for x in leases]
        if not tokens:
            return []
        return [int(r) for r in self._run("release", [self._now(), *tokens])]

    def reap(self, limit: int = 1000) -> list[Reaped]:
        """Return expired leases to waiting (or dead letters when out of attempts)."""
        flat = self._run("reap", [self._now(), limit])
        return [Reaped(*flat[i : i + 4]) for i in range(0, len(flat), 4)]

    def wait_for_work(self, timeout: float) -> bool:
        """Block until a producer signals new work or `timeout` seconds pass."""
        with _translated("wait_for_work"):
            return self.redis.blpop([self.keys.wake], timeout=max(timeout, 0.001)) is not None

    # -- operating ----------------------------------------------------------------------

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
        with _translated("state"):
            state = self.redis.hget(self.keys.request(rid), "state")
        if state is None:
            raise UnknownRequest(f"no request {rid!r} in queue {self.name!r}")
        return str(state)

    def wait(self, request_id: str, timeout: float | None = None) -> str | None:
        """Block until the request completes; returns done, failed or cancelled, or None on
        timeout. A request that already completed returns at once."""
        rid = validate_id(request_id, "request id")
        deadline = None if timeout is None else time.monotonic() + timeout
        with _translated("wait"):
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

    # -- workers ------------------------------------------------------------------------

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
        tokens = [x.lease if isinstance(x, Lease) else x for x in leases]
        reply = self._run(
            "extend",
            [self._now(), lease_ms, worker, ttl_ms, orjson.dumps(info, default=str), *tokens],
        )
        return [int(r) for r in reply]

    def try_reaper_lock(self, worker: str, ttl_ms: int) -> bool:
        """Take the queue's reaper lock for `ttl_ms` unless another worker holds it."""
        with _translated("reaper lock"):
            return bool(self.redis.set(self.keys.reaper_lock, worker, nx=True, px=ttl_ms))

    def leave_idle(self, consumer: str, lease_ms: int = 0) -> list[Lease]:
        """Stop being offered handoffs; returns tasks already handed over and not taken, which
        the caller must run or release."""
        with _translated("leave_idle"):
            self.redis.zrem(self.keys.idle, f"{consumer}|{lease_ms}")
            # After the ZREM no script can push here any more, so this drains it for good.
            items, _ = (
                self.redis.pipeline(transaction=True)
                .lrange(self.keys.handoff(consumer), 0, -1)
                .delete(self.keys.handoff(consumer))
                .execute()
            )
        return [lease for item in items for lease in _leases(orjson.loads(item))]

    def unregister(self, worker: str) -> None:
        """Remove a worker from the registry (on clean exit)."""
        with _translated("unregister"):
            self.redis.pipeline(transaction=False).zrem(self.keys.workers, worker).delete(
                self.keys.worker(worker)
            ).execute()


def _leases(flat: list[Any]) -> list[Lease]:
    """Leases from a script's flat reply: lease, attempt, payload, handler, lease_ms each."""
    loads = orjson.loads
    return [
        Lease(flat[i], int(flat[i + 1]), loads(flat[i + 2]), flat[i + 3], int(flat[i + 4]))
        for i in range(0, len(flat), 5)
    ]


def wait_for_any(
    queues: Sequence[Queue], timeout: float, consumer: str | None = None
) -> tuple[Queue, list[Lease]] | None:
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
    lists: dict[str, tuple[Queue, bool]] = {}
    if consumer is not None:
        lists |= {q.keys.handoff(consumer): (q, True) for q in queues}
    lists |= {q.keys.wake: (q, False) for q in queues}
    with _translated("wait_for_work"):
        reply = client.blpop(list(lists), timeout=max(timeout, 0.001))
    if reply is None:
        return None
    q, handed = lists[reply[0]]
    return q, _leases(orjson.loads(reply[1])) if handed else []

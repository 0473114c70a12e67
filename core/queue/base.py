"""What every part of the queue client shares: the Redis client, the scripts, the clock, and
the translation of Redis errors into the engine's exceptions."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
import redis

from .connect import Client, client_spec, connect, seeds
from .errors import InvalidInput, RedisReplyError, RedisUnavailable
from .keys import QueueKeys
from .models import Lease
from .scripts import call, library, load

MAX_PAYLOAD_BYTES = 64 * 1024
MAX_RESULT_BYTES = 64 * 1024  # a handler's result, as JSON (results.py)


def int_in(value: object, name: str, low: int, high: int | None = None) -> int:
    """`value` if it is an int (not a bool) within [low, high], else InvalidInput naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidInput(f"{name} must be {bounds}, got {value}")
    return value


@contextmanager
def translated(op: str) -> Iterator[None]:
    """Redis errors leave the engine as QueueError subclasses, with the cause chained."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(f"{op}: Redis is unreachable ({exc})") from exc
    except redis.ResponseError as exc:
        raise RedisReplyError(f"{op}: Redis refused the operation ({exc})") from exc


class QueueBase:
    """One named queue on one Redis (or Redis Cluster: all its keys share one hash tag)."""

    def __init__(
        self,
        client: Client,
        name: str = "default",
        *,
        prefix: str = "qa",
        max_payload_bytes: int = MAX_PAYLOAD_BYTES,
        max_result_bytes: int = MAX_RESULT_BYTES,
        clock: Callable[[], int] | None = None,
        metrics: bool = True,
    ) -> None:
        if not client.get_connection_kwargs().get("decode_responses"):
            raise InvalidInput("the Redis client must be made with decode_responses=True")
        self.redis: Any = client
        self.name = name
        self.keys = QueueKeys(prefix, name)
        self.max_payload_bytes = max_payload_bytes
        self.max_result_bytes = int_in(max_result_bytes, "max_result_bytes", 1)
        # None: scripts read the Redis server's clock, so hosts with skewed clocks agree.
        self._clock = clock
        # Per-handler metrics (core/queue/metrics.py): False makes this client's acks, fails
        # and reaps count nothing there, and send no run times.
        self.metrics = metrics
        self._qkeys = self.keys.script_keys
        # One Functions library for every operation, loaded into Redis when first needed.
        self._library = library()

    @classmethod
    def from_url(cls, url: str, name: str = "default", **kwargs: Any) -> Any:
        """A queue on the Redis at `url` (redis://, rediss:// or unix://), a node of a Redis
        Cluster, or a comma-separated list of seed nodes. A Redis that does not answer yet is
        not an error here: the first operation says so (RedisUnavailable)."""
        try:
            client = connect(url)
        except RedisUnavailable:
            client = connect(seeds(url)[0], cluster=False)
        return cls(client, name, **kwargs)

    def __repr__(self) -> str:
        return f"<Queue {self.keys.base!r}>"

    def client_spec(self) -> tuple[Any, ...]:
        """What another process needs to connect as this queue's client does (picklable:
        connect.client_from_spec() makes the client again there)."""
        return client_spec(self.redis)

    # -- helpers ------------------------------------------------------------------------

    def _now(self) -> int:
        return self._clock() if self._clock else 0

    @property
    def has_injected_clock(self) -> bool:
        """True when scripts run on the caller's clock (tests), not the Redis server's."""
        return self._clock is not None

    def now_ms(self) -> int:
        """The time scripts use: the injected clock, else the Redis server's."""
        if self._clock:
            return self._clock()
        with translated("time"):
            sec, usec = self.redis.time()
        return int(sec) * 1000 + int(usec) // 1000

    def prepare(self) -> None:
        """Load the engine into Redis now, so that an unreachable Redis or one too old for it
        (before 7.0) is a clear error at start rather than at the first task; and bring the
        queue's keys to this engine's layout if an older one wrote them (upgrade.lua)."""
        with translated("prepare"):
            load(self.redis, self._library)
        self._run("upgrade", [self._now()], [self.keys.legacy_handlers])

    def _run(self, name: str, args: Sequence[Any], extra_keys: Sequence[str] = ()) -> Any:
        # What translated() does, without a generator context per call: this is every
        # operation's path (a single submit is ~25 us of Python in all).
        try:
            return call(self.redis, self._library, name, [*self._qkeys, *extra_keys], args)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            raise RedisUnavailable(f"{name}: Redis is unreachable ({exc})") from exc
        except redis.ResponseError as exc:
            raise RedisReplyError(f"{name}: Redis refused the operation ({exc})") from exc


def leases_from_reply(flat: list[Any], traces: list[Any] | None = None) -> list[Lease]:
    """Leases from a script's flat reply: lease, attempt, payload, handler, lease_ms each;
    with `traces` (lease, traceparent, wait ms each: dequeue.lua), their trace contexts."""
    loads = orjson.loads
    if not traces:
        return [
            Lease(flat[i], int(flat[i + 1]), loads(flat[i + 2]), flat[i + 3], int(flat[i + 4]))
            for i in range(0, len(flat), 5)
        ]
    by_lease = {traces[i]: (traces[i + 1], int(traces[i + 2]))
                for i in range(0, len(traces), 3)}
    none = ("", -1)
    return [
        Lease(flat[i], int(flat[i + 1]), loads(flat[i + 2]), flat[i + 3], int(flat[i + 4]),
              *by_lease.get(flat[i], none))
        for i in range(0, len(flat), 5)
    ]


def leases_from_handoff(item: str | bytes) -> list[Lease]:
    """Leases from an item of a handoff list: a flat reply as JSON, or [flat, traces]."""
    value = orjson.loads(item)
    if value and isinstance(value[0], list):
        return leases_from_reply(value[0], value[1])
    return leases_from_reply(value)

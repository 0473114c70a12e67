"""What a request is made of before it is submitted: its options (RequestOptions, with the
defaults and bounds the engine checks), its tasks encoded as JSON, its id, and the follow-ups
a flow holds behind it (FollowUp)."""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict, Unpack

import orjson

from .base import int_in
from .errors import InvalidInput, InvalidPayload
from .keys import validate_id

DEFAULT_CONCURRENCY = 1_000_000  # no practical limit unless the request sets one
DEFAULT_PRIORITY = 50
SUBMIT_BATCH = 10_000  # tasks per script call: bounds how long one call holds Redis
DAY_MS = 86_400_000
# Upper bounds keep every time a script computes (now + option) an integer that Lua writes
# as digits: 1e16 and up would be written "1e+16", which Redis refuses halfway through.
MAX_LEASE_MS = DAY_MS  # a worker that needs longer renews its lease
MAX_RETENTION_MS = 365 * DAY_MS
MAX_BACKOFF_MS = DAY_MS
MAX_ATTEMPTS = 1000


def new_request_id() -> str:
    """A random request id: the hex of a version-4 UUID, as uuid.uuid4().hex writes it, in
    half the time (os.urandom, with no UUID object built)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # RFC 4122 variant
    return b.hex()


def dumps(payload: Any, index: int = -1) -> bytes:
    """One task as JSON; InvalidPayload naming the task if orjson cannot encode it."""
    try:
        return orjson.dumps(payload)
    except orjson.JSONEncodeError as exc:
        raise InvalidPayload(
            f"task {index} payload is not JSON-serialisable: {exc}", index=index
        ) from exc


def non_finite(value: Any, path: str = "payload") -> str | None:
    """Where `value` holds a float NaN or Infinity (orjson writes those as null), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, Mapping):
        items: Iterable[tuple[Any, Any]] = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
    else:
        return None
    for key, item in items:
        if (found := non_finite(item, f"{path}[{key!r}]")) is not None:
            return found
    return None


def task_list(tasks: object) -> list[Any] | tuple[Any, ...]:
    """`tasks` as a sequence: refused when it is one value that would iterate into several
    tasks (text into characters, a mapping into its keys) or not iterable at all."""
    if isinstance(tasks, list | tuple):
        return tasks
    if isinstance(tasks, str | bytes | bytearray | memoryview | Mapping):
        kind = "a mapping" if isinstance(tasks, Mapping) else f"a {type(tasks).__name__}"
        raise InvalidInput(
            f"tasks must be a list of task payloads, got {kind}; to send one task, "
            "wrap it in a list: [payload]"
        )
    if not isinstance(tasks, Iterable):
        raise InvalidInput(
            f"tasks must be a list of task payloads, got {type(tasks).__name__}"
        )
    return list(tasks)


class RequestOptions(TypedDict, total=False):
    """How a request runs: the options submit(), submit_after() and open() share, each
    optional (DEFAULT_OPTIONS)."""

    priority: int  # 0-99, higher first
    concurrency: int  # at most this many of its tasks leased or running at once
    tenant: str  # fair share is between tenants, then between their requests
    max_attempts: int  # runs of a task before it is a dead letter
    lease_ms: int  # a worker's lease on a task between heartbeats
    retention_ms: int  # how long the finished request is kept (with dead letters: a week)
    backoff_ms: int  # the first retry's delay, doubling (with jitter) ...
    backoff_max_ms: int  # ... up to this
    resources: Sequence[str]  # named resources its tasks use: the limits on them apply


DEFAULT_OPTIONS: RequestOptions = {
    "priority": DEFAULT_PRIORITY, "concurrency": DEFAULT_CONCURRENCY, "tenant": "default",
    "max_attempts": 3, "lease_ms": 30_000, "retention_ms": DAY_MS, "backoff_ms": 1_000,
    "backoff_max_ms": 300_000, "resources": (),
}


def _options(handler: str, options: RequestOptions) -> list[int | str]:
    """A request's options with the defaults, checked, in the order the scripts take them."""
    unknown = sorted(set(options) - set(DEFAULT_OPTIONS))
    if unknown:
        raise TypeError(f"unknown request option(s) {', '.join(unknown)}: the options are "
                        f"{', '.join(DEFAULT_OPTIONS)}")
    o: RequestOptions = {**DEFAULT_OPTIONS, **options}
    return [
        int_in(o["priority"], "priority", 0, 99),
        int_in(o["concurrency"], "concurrency", 1, DEFAULT_CONCURRENCY),
        validate_id(o["tenant"], "tenant"),
        validate_id(handler, "handler"),
        int_in(o["max_attempts"], "max_attempts", 1, MAX_ATTEMPTS),
        int_in(o["lease_ms"], "lease_ms", 100, MAX_LEASE_MS),
        int_in(o["retention_ms"], "retention_ms", 1000, MAX_RETENTION_MS),
        int_in(o["backoff_ms"], "backoff_ms", 0, MAX_BACKOFF_MS),
        int_in(o["backoff_max_ms"], "backoff_max_ms", 0, MAX_BACKOFF_MS),
        _resources(o["resources"]),
    ]


def _resources(names: object) -> str:
    """A request's resources as the scripts take them: names separated by spaces."""
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise InvalidInput(f"resources must be a list of names, got {names!r}")
    return " ".join(sorted({validate_id(n, "resource name") for n in names}))


class FollowUp:
    """A request to hold behind the one Producer.submit_flow() creates ("then"): its tasks,
    handler, id (None: a new random one) and RequestOptions, as submit_after() takes them."""

    __slots__ = ("handler", "options", "request_id", "tasks")

    def __init__(self, tasks: Iterable[Any], *, handler: str, request_id: str | None = None,
                 **options: Unpack[RequestOptions]) -> None:
        self.tasks = tasks
        self.handler = handler
        self.request_id = request_id
        self.options = options

    def __repr__(self) -> str:
        return f"FollowUp(handler={self.handler!r}, request_id={self.request_id!r})"

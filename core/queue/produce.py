"""Producing: submit a request with its tasks, or open one, add tasks and seal it; a request
with the follow-ups held behind it (and a record), created in one atomic call (a flow)."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypedDict, Unpack

import orjson

from . import handlers, registry
from .base import QueueBase, int_in, translated
from .due import due_spec
from .errors import (
    InvalidInput,
    InvalidPayload,
    PayloadTooLarge,
    QueueError,
    RequestIdTaken,
    TotalMismatch,
    UnknownHandlerWarning,
    check_code,
)
from .keys import validate_id
from .models import Flow, Submitted
from .records import NewRecord

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
HANDLER_REFRESH_S = 5.0  # a producer re-reads the announced handlers at most this often


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


DEFAULT_OPTIONS: RequestOptions = {
    "priority": DEFAULT_PRIORITY, "concurrency": DEFAULT_CONCURRENCY, "tenant": "default",
    "max_attempts": 3, "lease_ms": 30_000, "retention_ms": DAY_MS, "backoff_ms": 1_000,
    "backoff_max_ms": 300_000,
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
    ]


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


@dataclasses.dataclass
class _Offered:
    """What one producer process knows of a queue's announced handlers."""

    names: set[str] = dataclasses.field(default_factory=set)
    read_at: float = -math.inf
    warned: set[str] = dataclasses.field(default_factory=set)


# Per Redis client, per queue: Queue objects are cheap and made per call (core.conf), the
# client is not, so the knowledge lives as long as the client does.
_OFFERED: weakref.WeakKeyDictionary[Any, dict[str, _Offered]] = weakref.WeakKeyDictionary()
_OFFERED_LOCK = threading.Lock()


class Producer(QueueBase):
    """Creates requests and their tasks."""

    def _encode(self, tasks: object) -> list[bytes]:
        items = task_list(tasks)
        try:
            out = [orjson.dumps(task) for task in items]
        except orjson.JSONEncodeError:
            out = [dumps(task, i) for i, task in enumerate(items)]  # raises, naming the task
        if not out:
            return out
        # orjson writes NaN and Infinity as null. Only a batch with a null in it is walked.
        if b"null" in b"".join(out):
            for i, text in enumerate(out):
                if b"null" in text and (where := non_finite(items[i])) is not None:
                    raise InvalidPayload(
                        f"task {i} holds NaN or Infinity at {where}, which JSON cannot carry "
                        "(it would arrive as null); send null or a string instead",
                        index=i,
                    )
        limit = self.max_payload_bytes
        if max(map(len, out)) > limit:
            i, size = next((i, len(t)) for i, t in enumerate(out) if len(t) > limit)
            raise PayloadTooLarge(
                f"task {i} payload is {size} bytes; the limit is {limit}. "
                "Put the data somewhere shared and send a reference to it.",
                index=i,
                size=size,
            )
        return out

    def submit(
        self,
        tasks: Iterable[Any],
        *,
        handler: str,
        request_id: str | None = None,
        seal: bool = True,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        **options: Unpack[RequestOptions],
    ) -> Submitted:
        """Create a request whose tasks the workers run with the handler named `handler`;
        with seal=False more may be added, then seal(). `options`: RequestOptions (priority,
        concurrency, tenant, max_attempts, lease_ms, retention_ms, backoff_ms, backoff_max_ms;
        DEFAULT_OPTIONS for what is not given).

        With `run_at` (a timezone-aware datetime) or `delay` (seconds, or a timedelta, from
        now on the engine's clock) the request is "scheduled": its tasks become eligible at
        that time, under the usual priorities and fair share; until then it can be added to
        (if not sealed), sealed, cancelled or made due at once (run_now()). A time not after
        now runs now (state "active" or "open"; `due_ms` 0).

        Idempotent on `request_id`: submitting an id that exists changes nothing and returns
        the existing request (created=False). Warns (UnknownHandlerWarning) once per queue and
        handler when no worker of the queue has announced `handler`.
        """
        rid, meta, due, payloads = self._checked(tasks, handler, request_id, seal, run_at,
                                                 delay, options)
        mode = 1 if seal else 0
        if len(payloads) > SUBMIT_BATCH:
            mode = 2 if seal else 3  # too large for one call: the rest follows by add
        reply = self._run(
            "submit",
            [rid, self._now(), *meta, mode, due, *payloads[:SUBMIT_BATCH]],
            [self.keys.request(rid), self.keys.tasks(rid)],
        )
        created, state, total, resume = bool(reply[0]), str(reply[1]), int(reply[2]), int(reply[3])
        due_ms = int(reply[4])
        if (created and mode >= 2) or resume:
            # Append the rest, then seal if asked. A retry of a large submit that stopped
            # part-way resumes from the request's total, so it completes the request instead
            # of leaving it open with tasks missing; each batch appends only at its offset.
            total = self._append_from(rid, payloads, total)
            if (mode if created else resume) == 2:
                state = self.seal(rid)
        self._check_handler(handler)
        registry.seen(self)  # once per process and queue: the console lists every queue
        return Submitted(rid, created, state, total, due_ms)

    def submit_after(
        self,
        parent_id: str,
        tasks: Iterable[Any],
        *,
        handler: str,
        request_id: str | None = None,
        **options: Unpack[RequestOptions],
    ) -> Submitted:
        """A follow-up of request `parent_id` ("then"), with the options submit() takes:
        created sealed with its tasks and held
        (state "held") until the parent completes: done starts it, cancelled cancels it,
        failed keeps it held (requeuing the parent's dead letters may still finish the
        parent). Decided at once if the parent has completed already.

        Idempotent on `request_id`, as submit(); UnknownRequest if the parent does not exist.
        At most SUBMIT_BATCH tasks (one atomic call).
        """
        parent = validate_id(parent_id, "parent request id")
        rid = validate_id(request_id, "request id") if request_id is not None else new_request_id()
        meta = _options(handler, options)
        payloads = self._encode(tasks)
        if not payloads:
            raise InvalidInput("a follow-up request needs at least one task")
        if len(payloads) > SUBMIT_BATCH:
            raise InvalidInput(
                f"a follow-up request takes at most {SUBMIT_BATCH} tasks, got {len(payloads)}"
            )
        reply = self._run(
            "submit_after",
            [rid, self._now(), *meta, parent, *payloads],
            [self.keys.request(rid), self.keys.tasks(rid), self.keys.request(parent)],
        )
        check_code(reply, f"submit a follow-up of request {parent!r}")
        self._check_handler(handler)
        registry.seen(self)
        return Submitted(rid, bool(reply[0]), str(reply[1]), int(reply[2]))

    def submit_flow(
        self,
        tasks: Iterable[Any],
        *,
        handler: str,
        then: FollowUp | Sequence[FollowUp] = (),
        record: NewRecord | None = None,
        request_id: str | None = None,
        seal: bool = True,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        **options: Unpack[RequestOptions],
    ) -> Flow:
        """Create, in one atomic call, a request as submit() does (its first tasks, `seal`,
        `run_at`/`delay`, `options`), the follow-ups `then` held behind it as submit_after()
        makes them, and the `record` (Records.new()) beside it: a crash leaves all or none.

        Idempotent on `request_id`: if the request exists nothing changes, not even its
        follow-ups or record, and the result says what exists (created=False). RequestIdTaken,
        with nothing written, if it does not but a follow-up's id is another request's.
        At most SUBMIT_BATCH tasks in all; with seal=False, add() more, then seal().
        """
        rid, meta, due, payloads = self._checked(tasks, handler, request_id, seal, run_at,
                                                 delay, options)
        follow, fids, fargs, fkeys = self._follow_ups(rid, then)
        count = len(payloads) + sum(len(a) - 11 for a in fargs)  # id, 9 options, n: 11
        if count > SUBMIT_BATCH:
            raise InvalidInput(
                f"a flow is one atomic call of at most {SUBMIT_BATCH} tasks (the request's and "
                f"its follow-ups'), got {count}; submit the request open (seal=False) and add() "
                "the rest"
            )
        rec_args: list[Any] = [0, "", 0, 0]
        rec_keys: list[str] = []
        if record is not None:
            if not isinstance(record, NewRecord):
                raise InvalidInput(f"record must be made by Records.new(), got {record!r}")
            if not (record.key.startswith(self.keys.base)
                    and record.index.startswith(self.keys.base)):
                raise InvalidInput(f"record {record.record_id!r} is another queue's record")
            rec_args = [len(record.fields) // 2, record.record_id, record.keep_s, record.at_ms]
            rec_keys = [record.key, record.index]
        reply = self._run(
            "submit_flow",
            [rid, self._now(), *meta, int(seal), due, len(follow), *rec_args,
             *(x for a in fargs for x in a), *(record.fields if record else ()), *payloads],
            [self.keys.request(rid), self.keys.tasks(rid), *fkeys, *rec_keys],
        )
        if reply == -10:  # RequestIdTaken (errors.CODES): say which id
            with translated("submit_flow"):
                taken = [f for f in fids if self.redis.exists(self.keys.request(f))]
            raise RequestIdTaken(
                f"submit request {rid!r} with its follow-ups: the follow-up id "
                f"{', '.join(map(repr, taken or fids))} is an existing request's; nothing was "
                "written")
        check_code(reply, f"submit the flow of request {rid!r}")
        for h in dict.fromkeys([handler, *(f.handler for f in follow)]):
            self._check_handler(h)
        registry.seen(self)
        created = bool(reply[0])
        ours = Submitted(rid, created, str(reply[1]), int(reply[2]), int(reply[3]))
        then_out = tuple(
            None if reply[i] is None else Submitted(fid, created, str(reply[i]), int(reply[i + 1]))
            for fid, i in zip(fids, range(4, len(reply), 2), strict=True)
        )
        return Flow(ours, then_out)

    def _follow_ups(
        self, rid: str, then: FollowUp | Sequence[FollowUp]
    ) -> tuple[list[FollowUp], list[str], list[list[Any]], list[str]]:
        """The follow-ups of a flow, checked: their ids, script arguments (id, options, task
        count, payloads each) and keys."""
        if isinstance(then, FollowUp):
            follow = [then]
        elif isinstance(then, list | tuple):
            follow = list(then)
        else:
            raise InvalidInput(f"then= takes a FollowUp or a list of them, got {then!r}")
        fids: list[str] = []
        fargs: list[list[Any]] = []
        fkeys: list[str] = []
        for f in follow:
            if not isinstance(f, FollowUp):
                raise InvalidInput(f"then= takes FollowUp(tasks, handler=...) values, got {f!r}")
            fid = (validate_id(f.request_id, "follow-up request id") if f.request_id is not None
                   else new_request_id())
            if fid == rid or fid in fids:
                raise InvalidInput(f"follow-up request id {fid!r} is used twice in the flow "
                                   f"(request {rid!r}, follow-ups {fids})")
            try:
                meta = _options(f.handler, f.options)
                fp = self._encode(f.tasks)
            except InvalidInput as exc:  # say which request of the flow it is about
                exc.args = (f"follow-up {fid!r}: {exc.args[0]}", *exc.args[1:])
                raise
            if not fp:
                raise InvalidInput(f"follow-up {fid!r}: a follow-up request needs at least one "
                                   "task")
            fids.append(fid)
            fargs.append([fid, *meta, len(fp), *fp])
            fkeys += [self.keys.request(fid), self.keys.tasks(fid)]
        return follow, fids, fargs, fkeys

    def _checked(
        self, tasks: Iterable[Any], handler: str, request_id: str | None, seal: bool,
        run_at: datetime | None, delay: float | timedelta | None, options: RequestOptions,
    ) -> tuple[str, list[int | str], str, list[bytes]]:
        """A new request's id, options, due time and encoded tasks, checked (submit's and
        submit_flow's arguments)."""
        rid = validate_id(request_id, "request id") if request_id is not None else new_request_id()
        meta = _options(handler, options)
        if not isinstance(seal, bool):
            raise InvalidInput(f"seal must be True or False, got {seal!r}")
        due = due_spec(run_at, delay)
        payloads = self._encode(tasks)
        if seal and not payloads:
            raise InvalidInput("a request needs at least one task (or submit with seal=False)")
        return rid, meta, due, payloads

    def _append_from(self, rid: str, payloads: list[bytes], total: int) -> int:
        while total < len(payloads):
            batch = payloads[total : total + SUBMIT_BATCH]
            try:
                total = self._add(rid, batch, expect=total)
            except TotalMismatch:  # another retry of the same submit got there first
                total = int(self.redis.hget(self.keys.request(rid), "total") or 0)
        return total

    def _check_handler(self, handler: str) -> None:
        """Warn once per queue and handler that no worker announced it. Reads the announced
        names on the first submit, then at most every HANDLER_REFRESH_S and only for a name
        not seen yet: a submit of a known handler costs no round trip."""
        offered: _Offered | None = getattr(self, "_offered", None)
        if offered is None:
            with _OFFERED_LOCK:
                by_queue = _OFFERED.setdefault(self.redis, {})
                offered = by_queue.setdefault(self.keys.base, _Offered())
            self._offered = offered  # the shared record, found once per Queue object
        if handler in offered.names or handler in offered.warned:
            return
        now = time.monotonic()
        if now - offered.read_at >= HANDLER_REFRESH_S:
            offered.read_at = now
            try:
                offered.names = handlers.names(self)
            except QueueError:
                return  # the request is in; a failed check must not look like a failed submit
            if handler in offered.names:
                return
        offered.warned.add(handler)
        # Point the warning at the caller's line, outside this module (submit, or open).
        level, frame = 1, sys._getframe(0)
        while frame.f_back is not None and frame.f_globals.get("__name__") == __name__:
            frame, level = frame.f_back, level + 1
        warnings.warn(
            f"no worker of queue {self.name!r} has announced handler {handler!r}: its tasks "
            "wait until a worker that runs it starts (a typo? a worker not deployed yet?)",
            UnknownHandlerWarning,
            stacklevel=level,
        )

    def open(
        self, *, handler: str, request_id: str | None = None, run_at: datetime | None = None,
        delay: float | timedelta | None = None, **options: Unpack[RequestOptions],
    ) -> Submitted:
        """Create a request that takes tasks by add() until seal(); options as submit()'s
        (with run_at or delay, its tasks wait for that time, however early it is sealed)."""
        return self.submit([], handler=handler, request_id=request_id, seal=False,
                           run_at=run_at, delay=delay, **options)

    def add(self, request_id: str, tasks: Iterable[Any]) -> int:
        """Append tasks to an open request; returns its new total (with no tasks, its total)."""
        rid = validate_id(request_id, "request id")
        payloads = self._encode(tasks)
        total = self._add(rid, payloads[:SUBMIT_BATCH])
        for i in range(SUBMIT_BATCH, len(payloads), SUBMIT_BATCH):
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

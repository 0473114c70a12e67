"""Producing: submit a request with its tasks, or open one, add tasks and seal it; a request
with the follow-ups held behind it (and a record), created in one atomic call (a flow)."""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar, Unpack

import orjson

from . import handlers, registry, tracehook
from .base import QueueBase, translated
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
from .options import (
    SUBMIT_BATCH,
    FollowUp,
    RequestOptions,
    _options,
    dumps,
    new_request_id,
    non_finite,
    task_list,
)
from .records import NewRecord
from .tracehook import check_traceparent
from .unique import unique_spec

_Sent = TypeVar("_Sent", Submitted, Flow)  # what _sent hands back: a submit's result or a flow's
HANDLER_REFRESH_S = 5.0  # a producer re-reads the announced handlers at most this often


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
        unique_key: str | None = None,
        unique_scope: str = "active",
        on_duplicate: str = "return",
        traceparent: str | None = None,
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

        With `unique_key`, while another request holds that key (its `unique_scope`:
        "waiting", "active" or "done+<duration>") nothing is created and the holder is
        returned (created=False, its id), after `on_duplicate` ("return", "replace" its tasks
        while none has started, or "delay" its due time to this one's): core.queue.unique.

        `traceparent`: a W3C trace context kept with the request (issue 38): its tasks' runs
        are traced as its children. By default, while tracing is on (core.tracing), that of
        a "send" span of this submit under the caller's current span; "" keeps none.
        """
        args = (tasks, handler, request_id, seal, run_at, delay, unique_key, unique_scope,
                on_duplicate, options)
        if traceparent is None and tracehook.SENDING is not None:
            return self._sent(self._submit, args)
        return self._submit(*args, check_traceparent(traceparent or ""))

    def _sent(self, call: Callable[..., _Sent], args: tuple[Any, ...]) -> _Sent:
        """`call(*args, traceparent)` inside a "send" span of tracing (tracehook.SENDING),
        whose context goes with the request: submit's, submit_after's and submit_flow's."""
        assert tracehook.SENDING is not None
        with tracehook.SENDING(self.name) as sending:
            out = call(*args, sending.traceparent)
            made = out.request if isinstance(out, Flow) else out
            sending.sent(made.request_id, made.total)
            return out

    def _submit(
        self, tasks: Iterable[Any], handler: str, request_id: str | None, seal: bool,
        run_at: datetime | None, delay: float | timedelta | None, unique_key: str | None,
        unique_scope: str, on_duplicate: str, options: RequestOptions, tp: str,
    ) -> Submitted:
        rid, meta, due, payloads = self._checked(tasks, handler, request_id, seal, run_at,
                                                 delay, options)
        unique = unique_spec(unique_key, unique_scope, on_duplicate)
        mode = 1 if seal else 0
        if len(payloads) > SUBMIT_BATCH:
            if unique:
                raise InvalidInput(f"a unique submit is one call: at most {SUBMIT_BATCH} tasks")
            mode = 2 if seal else 3  # too large for one call: the rest follows by add
        reply = self._run(
            "submit",
            [rid, self._now(), *meta, mode, due, unique, tp, *payloads[:SUBMIT_BATCH]],
            [self.keys.request(rid), self.keys.tasks(rid)],
        )
        created, state, total, resume = bool(reply[0]), str(reply[1]), int(reply[2]), int(reply[3])
        due_ms = int(reply[4])
        if len(reply) > 5:  # a duplicate of the request holding the unique key
            return Submitted(str(reply[5]), False, state, total, due_ms)
        if (created and mode >= 2) or resume:
            total, state = self._rest(rid, payloads, total, (mode if created else resume) == 2,
                                      state)
        self._check_handler(handler)
        registry.seen(self)  # once per process and queue: the console lists every queue
        return Submitted(rid, created, state, total, due_ms)

    def _rest(self, rid: str, payloads: list[Any], total: int, seal: bool,
              state: str) -> tuple[int, str]:
        """A large submit's tasks past its first call appended, then sealed if asked: (total,
        state). A retry of a large submit that stopped part-way resumes from the request's
        total, so it completes the request instead of leaving it open with tasks missing;
        each batch appends only at its offset."""
        total = self._append_from(rid, payloads, total)
        return total, self.seal(rid) if seal else state

    def submit_after(
        self,
        parent_id: str,
        tasks: Iterable[Any],
        *,
        handler: str,
        request_id: str | None = None,
        traceparent: str | None = None,
        **options: Unpack[RequestOptions],
    ) -> Submitted:
        """A follow-up of request `parent_id` ("then"), with the options submit() takes:
        created sealed with its tasks and held
        (state "held") until the parent completes: done starts it, cancelled cancels it,
        failed keeps it held (requeuing the parent's dead letters may still finish the
        parent). Decided at once if the parent has completed already.

        Idempotent on `request_id`, as submit(); UnknownRequest if the parent does not exist.
        At most SUBMIT_BATCH tasks (one atomic call). `traceparent` as submit()'s.
        """
        args = (parent_id, tasks, handler, request_id, options)
        if traceparent is None and tracehook.SENDING is not None:
            return self._sent(self._submit_after, args)
        return self._submit_after(*args, check_traceparent(traceparent or ""))

    def _submit_after(self, parent_id: str, tasks: Iterable[Any], handler: str,
                      request_id: str | None, options: RequestOptions, tp: str) -> Submitted:
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
            [rid, self._now(), *meta, parent, tp, *payloads],
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
        unique_key: str | None = None,
        unique_scope: str = "active",
        on_duplicate: str = "return",
        request_id: str | None = None,
        seal: bool = True,
        run_at: datetime | None = None,
        delay: float | timedelta | None = None,
        traceparent: str | None = None,
        **options: Unpack[RequestOptions],
    ) -> Flow:
        """Create, in one atomic call, a request as submit() does (its first tasks, `seal`,
        `run_at`/`delay`, `options`, `traceparent`), the follow-ups `then` held behind it as
        submit_after() makes them (with the same trace context), and the `record`
        (Records.new()) beside it: a crash leaves all or none.

        Idempotent on `request_id`: if the request exists nothing changes, not even its
        follow-ups or record, and the result says what exists (created=False). RequestIdTaken,
        with nothing written, if it does not but a follow-up's id is another request's.
        At most SUBMIT_BATCH tasks in all; with seal=False, add() more, then seal().
        """
        args = (tasks, handler, then, record, unique_key, unique_scope, on_duplicate,
                request_id, seal, run_at, delay, options)
        if traceparent is None and tracehook.SENDING is not None:
            return self._sent(self._flow, args)
        return self._flow(*args, check_traceparent(traceparent or ""))

    def _flow(
        self, tasks: Iterable[Any], handler: str, then: FollowUp | Sequence[FollowUp],
        record: NewRecord | None, unique_key: str | None, unique_scope: str,
        on_duplicate: str, request_id: str | None, seal: bool, run_at: datetime | None,
        delay: float | timedelta | None, options: RequestOptions, tp: str,
    ) -> Flow:
        rid, meta, due, payloads = self._checked(tasks, handler, request_id, seal, run_at,
                                                 delay, options)
        unique = unique_spec(unique_key, unique_scope, on_duplicate)
        follow, fids, fargs, fkeys = self._follow_ups(rid, then)
        count = len(payloads) + sum(len(a) - 12 for a in fargs)  # id, 10 options, n: 12
        if count > SUBMIT_BATCH:
            raise InvalidInput(
                f"a flow is one atomic call of at most {SUBMIT_BATCH} tasks (the request's and "
                f"its follow-ups'), got {count}; submit the request open (seal=False) and add() "
                "the rest"
            )
        rec_args, rec_keys = self._record_args(record)
        reply = self._run(
            "submit_flow",
            [rid, self._now(), *meta, int(seal), due, unique, len(follow), *rec_args, tp,
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
        return _flow_of(rid, fids, reply)

    def _record_args(self, record: NewRecord | None) -> tuple[list[Any], list[str]]:
        """A flow's record as submit_flow.lua takes it: (its ARGV part, its KEYS part)."""
        if record is None:
            return [0, "", 0, 0], []
        if not isinstance(record, NewRecord):
            raise InvalidInput(f"record must be made by Records.new(), got {record!r}")
        if not (record.key.startswith(self.keys.base)
                and record.index.startswith(self.keys.base)):
            raise InvalidInput(f"record {record.record_id!r} is another queue's record")
        return ([len(record.fields) // 2, record.record_id, record.keep_s, record.at_ms],
                [record.key, record.index])

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
        """Warn once per queue and handler that no live worker runs it. Reads the announced
        names on the first submit, then at most every HANDLER_REFRESH_S (announcements end
        with their workers): a submit costs no round trip in between."""
        offered: _Offered | None = getattr(self, "_offered", None)
        if offered is None:
            with _OFFERED_LOCK:
                by_queue = _OFFERED.setdefault(self.redis, {})
                offered = by_queue.setdefault(self.keys.base, _Offered())
            self._offered = offered  # the shared record, found once per Queue object
        now = time.monotonic()
        fresh = now - offered.read_at < HANDLER_REFRESH_S
        if handler in offered.warned or (fresh and handler in offered.names):
            return
        if not fresh:
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


def _flow_of(rid: str, fids: list[str], reply: list[Any]) -> Flow:
    """What submit_flow.lua answered, as a Flow: the request and each follow-up (None for one
    not made); a duplicate of a unique key's holder is the holder's id, no follow-ups."""
    created = bool(reply[0])
    if not created and len(reply) == 5 and isinstance(reply[4], str):  # a duplicate
        return Flow(Submitted(reply[4], False, str(reply[1]), int(reply[2]), int(reply[3])),
                    (None,) * len(fids))
    ours = Submitted(rid, created, str(reply[1]), int(reply[2]), int(reply[3]))
    then_out = tuple(
        None if reply[i] is None else Submitted(fid, created, str(reply[i]), int(reply[i + 1]))
        for fid, i in zip(fids, range(4, len(reply), 2), strict=True)
    )
    return Flow(ours, then_out)

"""Plain values the engine hands back: leases, submit results, introspection rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from .errors import InvalidInput
from .keys import validate_id
from .unique import scope_text

TERMINAL_STATES = frozenset({"done", "failed", "cancelled"})
# "held": a follow-up (Producer.submit_after) waiting for its parent request to complete.
# "scheduled": a delayed request (submit(run_at=... | delay=...)) waiting for its due time.
STATES = ("open", "scheduled", "held", "active", "cancelling", "done", "failed", "cancelled")


@dataclass(frozen=True, slots=True)
class Lease:
    """One task leased to a consumer. `lease` is the token to ack, fail, extend or release."""

    lease: str
    attempt: int
    payload: Any
    handler: str
    lease_ms: int
    # The producer's trace context (a W3C traceparent) when its request was submitted with
    # one, else ""; and how long the task waited to be leased (ms, -1 unknown), given only
    # with a trace context (issue 38: the worker's span of the run).
    trace: str = ""
    wait_ms: int = -1

    @property
    def delivery(self) -> int:
        """How many times the task was handed out, this one included (1: its first run)."""
        return int(self.lease.rsplit("/", 1)[1])

    @property
    def request_id(self) -> str:
        return self.lease.split("/", 1)[0]

    @property
    def task_id(self) -> str:
        return self.lease.split("/", 2)[1]


@dataclass(frozen=True, slots=True)
class Submitted:
    request_id: str
    created: bool
    state: str
    total: int
    due_ms: int = 0  # a scheduled request's due time (ms since the epoch); 0 when not


@dataclass(frozen=True, slots=True)
class Flow:
    """What Producer.submit_flow() made, or found: the request, and each follow-up (None: the
    request existed already, and that id is no follow-up of it)."""

    request: Submitted
    then: tuple[Submitted | None, ...]

    @property
    def created(self) -> bool:
        return self.request.created


@dataclass(frozen=True, slots=True)
class FailOutcome:
    outcome: str  # "delayed", "waiting", "dead" or "cancelled"
    attempts: int
    delay_ms: int


@dataclass(frozen=True, slots=True)
class Reaped:
    request_id: str
    task_id: str
    worker: str
    # "waiting", "dead" or "cancelled"; a lease an operator revoked (Operator.claim) that ran
    # out moves on as asked: "waiting", "cancelled" or "claimed" (to the claim's consumer)
    outcome: str


@dataclass(frozen=True, slots=True)
class Cancelled:
    state: str
    dropped: int
    running: int
    changed: bool = True  # False: it was cancelled already, or had finished


@dataclass(frozen=True, slots=True)
class RequestInfo:
    id: str
    state: str
    priority: int
    concurrency: int
    tenant: str
    handler: str
    total: int
    waiting: int
    leased: int
    delayed: int
    done: int
    dead: int
    cancelled: int
    max_attempts: int
    lease_ms: int
    created_ms: int
    updated_ms: int
    finished_ms: int | None
    discarded: int = 0  # dead letters an operator deleted
    after: str | None = None  # a follow-up's parent request (Producer.submit_after)
    then: tuple[str, ...] = ()  # the follow-ups held behind this request
    due_ms: int | None = None  # a delayed request's due time (kept once it is due)
    # Its unique key while it holds it or after ("" without one), and the key's scope as
    # Queue.submit takes it ("active", "done+3600s"; core.queue.unique); its resources.
    unique_key: str = ""
    unique_scope: str = ""
    resources: tuple[str, ...] = ()
    # The producer's W3C trace context kept by its submit ("" without one; issue 38).
    traceparent: str = ""

    @classmethod
    def from_hash(cls, rid: str, h: dict[str, str]) -> RequestInfo:
        def i(name: str) -> int:
            return int(h.get(name) or 0)

        return cls(
            id=rid,
            state=h["state"],
            priority=i("priority"),
            concurrency=i("concurrency"),
            tenant=h.get("tenant", ""),
            handler=h.get("handler", ""),
            total=i("total"),
            waiting=i("waiting"),
            leased=i("leased"),
            delayed=i("delayed"),
            done=i("done"),
            dead=i("dead"),
            cancelled=i("cancelled"),
            max_attempts=i("max_attempts"),
            lease_ms=i("lease_ms"),
            created_ms=i("created_ms"),
            updated_ms=i("updated_ms"),
            finished_ms=int(h["finished_ms"]) if h.get("finished_ms") else None,
            discarded=i("discarded"),
            after=h.get("after") or None,
            then=tuple(h.get("then", "").split()),
            due_ms=int(h["due_ms"]) if h.get("due_ms") else None,
            **_unique_of(h.get("uk", "")),
            resources=tuple(h.get("rs", "").split()),
            traceparent=h.get("tp", "")[:55],  # then " <due ms>" if delayed (submit.lua)
        )

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


def _unique_of(uk: str) -> dict[str, str]:
    """RequestInfo's unique_key and unique_scope from a request's hash field `uk`
    ("<scope>|<keep ms>|<key>"; the key may hold no "|", unique.py's pattern): none if empty
    or not of that shape."""
    kind, _, rest = uk.partition("|")
    keep, _, key = rest.partition("|")
    if not key or not keep.isdigit():
        return {}
    return {"unique_key": key, "unique_scope": scope_text(kind, int(keep))}


@dataclass(frozen=True, slots=True)
class PendingEntry:
    """A task in a request's pending entries list: leased to a worker, or parked."""

    task_id: str
    consumer: str  # a worker, or "~waiting", "~delayed", "~dead"
    idle_ms: int
    deliveries: int
    lease_expires_ms: int | None
    # Released or claimed by an operator while its holder may still run it: when, at the
    # latest, it moves on (its old lease's expiry); it stays leased to the holder until then.
    moves_by_ms: int | None = None


@dataclass(frozen=True, slots=True)
class LogLine:
    at_ms: int  # when the worker logged it (Redis server time, to the flush's precision)
    text: str


@dataclass(frozen=True, slots=True)
class TaskProgress:
    """What a running (or finished) task last reported: ctx.progress() and ctx.log()."""

    task_id: str
    done: float | None  # None: the task logged lines but reported no progress
    total: float | None  # None: unknown
    message: str
    worker: str
    updated_ms: int  # the last write (progress or log)
    log: tuple[LogLine, ...] = ()
    running: bool = False  # leased to a worker right now (read.progress says)

    @property
    def percent(self) -> float | None:
        """done / total as a percentage in [0, 100]; None without a positive total."""
        if self.done is None or not self.total:
            return None
        return max(0.0, min(100.0, 100.0 * self.done / self.total))


@dataclass(frozen=True, slots=True)
class DeadLetter:
    id: str
    request_id: str
    task_id: str
    payload: str
    error: str
    traceback: str
    attempts: int
    worker: str
    ts_ms: int
    handler: str
    tenant: str

    @classmethod
    def from_entry(cls, eid: str, f: dict[str, str]) -> DeadLetter:
        return cls(
            id=eid,
            request_id=f.get("request", ""),
            task_id=f.get("task", ""),
            payload=f.get("payload", ""),
            error=f.get("error", ""),
            traceback=f.get("traceback", ""),
            attempts=int(f.get("attempts") or 0),
            worker=f.get("worker", ""),
            ts_ms=int(f.get("ts") or 0),
            handler=f.get("handler", ""),
            tenant=f.get("tenant", ""),
        )


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    name: str
    last_beat_ms: int
    info: dict[str, Any]  # {} when its entry expired, or held no JSON object
    unreadable: str = ""  # the entry as written, when it is not a JSON object
    control: str = ""  # what an operator asked of it: "quiet", "stop" or "" (control_worker)


@dataclass(frozen=True, slots=True)
class HandlerOffer:
    """A handler a live worker of the queue runs: the worker whose announcement lasts
    longest, and until when (ms) unless its heartbeat renews it."""

    name: str
    live_until_ms: int
    worker: str


@dataclass(frozen=True, slots=True)
class PageCursor:
    """Where a page of a score-ordered index ended: the last row's score and member (request
    id or worker name). Its text form, "<score>:<member>", fits a URL; ids never hold ':'."""

    score: int
    member: str

    def __str__(self) -> str:
        return f"{self.score}:{self.member}"

    @classmethod
    def parse(cls, text: str) -> PageCursor:
        """The cursor written by str(); InvalidInput for anything else (a hand-edited URL)."""
        score, sep, member = text.partition(":")
        if not sep or not score.isdecimal() or len(score) > 20:
            raise InvalidInput(f"invalid page cursor {text!r}: expected <score>:<id>")
        return cls(int(score), validate_id(member, "page cursor id"))


T = TypeVar("T")


class Page(NamedTuple, Generic[T]):
    """One page of rows, and the cursor for the next page (None on the last one)."""

    items: list[T]
    cursor: PageCursor | None


@dataclass(frozen=True, slots=True)
class Limit:
    """A limit on a key (core.queue.limits): on the queue, a handler, a tenant or a resource
    (`value`), at most `rate` starts per `per_ms` and/or `concurrency` leased at once."""

    name: str
    on: str
    value: str = ""
    rate: int | None = None
    per_ms: int = 1000
    concurrency: int | None = None


@dataclass(frozen=True, slots=True)
class LimitUse:
    """A limit and its use now: tasks leased under it (`held`, against its concurrency) and
    started within its window (`started`, against its rate)."""

    limit: Limit
    held: int
    started: int

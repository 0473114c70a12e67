"""How one worker process runs (WorkerConfig), and the times its parts share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from core.queue import Lease, RedisReplyError, RedisUnavailable
from core.queue.keys import validate_id

from .heartbeat import default_name

# A slot's batch grows toward --prefetch only while it holds less work than this (tasks like
# those it ran): quick tasks go at one round trip per many, and a worker never leases ahead
# more than this much work that an idle slot or worker could be running instead.
BATCH_WORK_S = 0.02
# ... and while it spans at most this many requests: Redis's share of a call is ~6 µs a task
# and ~30 µs more for each request it touches (its hash, index, completion), so a batch of
# one-task requests stops at this size (~2 ms of Redis a call) while tasks of one request go
# on to --prefetch (~1.3 ms of Redis a call at 256 no-op tasks).
BATCH_REQUESTS = 64
MAX_SLOTS = 1024  # a worker's task threads: more in one process only contend for its GIL
GIVE_BACK_S = 0.1  # a task running this long gives back the tasks leased behind it
# Redis unreachable or answering with an error for now: log once, back off, carry on.
PASSING = (RedisUnavailable, RedisReplyError)
ACK_FLUSH_S = 0.02  # a finished task's ack waits at most this long for the rest of its batch
READY_POLL_S = 0.5  # how often a waiting worker asks its handlers' readiness checks again
STARTUP_GRACE_S = 60.0  # waiting this long at start for a service is worth a warning
# Once the grace is over (or a second signal came), running handlers are told to stop at their
# next ctx.check() and given this long to return; their tasks go back only once they have. One
# that has not returned by then ends with the process, its lease still held: it expires, or the
# stack's supervisor reclaims it when it sees the process exit. Never two runs at once.
STOP_WAIT_S = 2.0


@dataclass
class WorkerConfig:
    """How one worker process runs. Times are seconds."""

    name: str = field(default_factory=default_name)
    slots: int = 1
    prefetch: int = 256
    dead_after: float = 10.0
    grace: float = 30.0
    burst: bool = False
    max_tasks: int | None = None
    idle_wait: float = 1.0
    time_limit: float | None = None  # hard limit per task run (s); a handler's own wins
    heartbeat: str = "process"  # "process": renewals survive a handler holding the GIL

    def __post_init__(self) -> None:
        validate_id(self.name, "worker name")
        if not 1 <= self.slots <= MAX_SLOTS:
            raise ValueError(f"slots must be 1 to {MAX_SLOTS:,} (threads of one process: run "
                             "more processes for more)")
        if not 1 <= self.prefetch <= 1000:
            raise ValueError("prefetch must be between 1 and 1000")
        if not 0.5 <= self.dead_after <= 3600:
            raise ValueError("dead_after must be between 0.5 and 3600 seconds")
        if self.grace < 0:
            raise ValueError("grace must not be negative")
        if self.max_tasks is not None and self.max_tasks < 1:
            raise ValueError("max_tasks must be at least 1")
        if self.time_limit is not None and not self.time_limit > 0:
            raise ValueError("time_limit must be a positive number of seconds")
        if self.heartbeat not in ("process", "thread"):
            raise ValueError("heartbeat must be 'process' or 'thread'")

    @property
    def lease_ms(self) -> int:
        return int(self.dead_after * 1000)


def next_batch(batch: int, per_task: float, per_request: float, prefetch: int) -> int:
    """A slot's next batch after one that took `per_task` seconds a task and held
    `per_request` tasks a request: doubled, but to no more than BATCH_WORK_S of such tasks
    (one, once a task takes longer), BATCH_REQUESTS of such requests, and `prefetch`."""
    fits = int(BATCH_WORK_S / per_task) if per_task > 0 else prefetch
    spans = int(BATCH_REQUESTS * per_request)
    return max(1, min(batch * 2, fits, spans, prefetch))


def tasks_per_request(leases: Sequence[Lease]) -> float:
    """How many of `leases` a request holds, on average (1.0 when there are none)."""
    if not leases or leases[0].request_id == leases[-1].request_id:
        return float(len(leases) or 1)  # leased request by request: all of one request
    return len(leases) / len({x.request_id for x in leases})

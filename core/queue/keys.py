"""Key names and identifier validation: every Redis key of a queue is made here."""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidInput

# Ids become parts of key names and of "<rid>/<task>/<n>" lease strings, so only characters
# that cannot break either are allowed (no braces, colons, slashes, spaces or newlines).
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@=+-]{0,127}")
_TASK_ID = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
_ID_PART_MAX = 2**64 - 1
MAX_TASK_ID = f"{_ID_PART_MAX}-{_ID_PART_MAX}"  # the last stream entry id Redis can hold


# The consumer group on every request's task stream (GROUP in lua/_base.lua).
GROUP = "g"


def validate_id(value: object, what: str) -> str:
    """Return `value` if it is a safe identifier, else raise InvalidInput saying why."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidInput(
            f"invalid {what} {value!r}: use 1-128 characters from A-Z a-z 0-9 and _ . @ = + -, "
            "starting with a letter or digit"
        )
    return value


def validate_task_id(value: object) -> str:
    """Return `value` if it looks like a task (stream entry) id such as 1700000000000-0."""
    # Each part is an unsigned 64-bit integer to Redis, which refuses anything larger.
    if not isinstance(value, str) or not _TASK_ID.fullmatch(value) or any(
        int(part) > _ID_PART_MAX for part in value.split("-")
    ):
        raise InvalidInput(f"invalid task id {value!r}: expected <milliseconds>-<sequence>, "
                           f"each at most {_ID_PART_MAX}")
    return value


def registry_key(prefix: str) -> str:
    """The zset of every queue name under `prefix` -> when it was last seen (ms). Outside
    every queue's hash tag: on a cluster it is a key of its own, written and read alone."""
    return f"{validate_id(prefix, 'key prefix')}:queues"


def spark_warming_key(prefix: str) -> str:
    """Hash: the Spark warm-up under way for the workers of `prefix` (spark_warming.py), while
    there is one. Outside every queue's hash tag, as the registry."""
    return f"{validate_id(prefix, 'key prefix')}:spark:warming"


@dataclass(frozen=True)
class QueueKeys:
    """All key names of one queue; they share the hash tag {queue} so one shard holds them."""

    prefix: str
    queue: str

    def __post_init__(self) -> None:
        validate_id(self.prefix, "key prefix")
        validate_id(self.queue, "queue name")

    @property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.queue}}}:"

    # Queue-level keys, in the order every script receives them as KEYS[1..8].
    @property
    def script_keys(self) -> list[str]:
        b = self.base
        return [
            b + s for s in ("ready", "leases", "delayed", "dead", "events", "wake", "seq", "stats")
        ]

    @property
    def ready(self) -> str:
        return self.base + "ready"

    @property
    def leases(self) -> str:
        return self.base + "leases"

    @property
    def delayed(self) -> str:
        return self.base + "delayed"

    @property
    def dead(self) -> str:
        return self.base + "dead"

    @property
    def events(self) -> str:
        return self.base + "events"

    @property
    def wake(self) -> str:
        return self.base + "wake"

    @property
    def stats(self) -> str:
        return self.base + "stats"

    @property
    def registry(self) -> str:
        """The prefix's queue registry (see registry_key); not a key of this queue."""
        return registry_key(self.prefix)

    @property
    def reaper_lock(self) -> str:
        return self.base + "reaper"

    @property
    def workers(self) -> str:
        return self.base + "workers"

    @property
    def stopped_workers(self) -> str:
        """Zset: workers an operator stopped that have since exited -> when (ms). Each keeps
        its entry (worker:<name>: its last info, control "stop", who asked and when) until a
        worker of that name starts again, its stack restarts or STOPPED_KEPT_MS has passed
        (Consumer.unregister, prune.py)."""
        return self.base + "workers:stopped"

    @property
    def handlers(self) -> str:
        """Zset: "<handler>|<worker>" -> until when that worker is presumed alive (ms): the
        handlers that live workers run, renewed by their heartbeats (see lua/_base.lua)."""
        return self.base + "hw"

    @property
    def legacy_handlers(self) -> str:
        """Hash of engines before issue 33 (handler -> "<ms>/<worker>"); upgrade.lua drops it."""
        return self.base + "handlers"

    @property
    def paused(self) -> str:
        """String: when the queue was paused (ms); absent while it runs."""
        return self.base + "paused"

    @property
    def scheduled(self) -> str:
        """Zset: delayed requests (state "scheduled") -> due time (ms); see lua/_base.lua."""
        return self.base + "scheduled"

    @property
    def idle(self) -> str:
        return self.base + "idle"

    @property
    def limits(self) -> str:
        """Hash: limit name -> "<on>|<value>|<rate>|<per_ms>|<concurrency>" (limits.py)."""
        return self.base + "limits"

    def unique(self, key: str) -> str:
        """String: the id of the request holding the unique key `key` (unique.py)."""
        return f"{self.base}uniq:{key}"

    def limit_held(self, name: str) -> str:
        """Zset: the leases counted against a limit's concurrency -> when leased."""
        return f"{self.base}lim:{name}:held"

    def limit_starts(self, name: str) -> str:
        """Zset: the leases started within a limit's rate window -> when."""
        return f"{self.base}lim:{name}:starts"

    @property
    def revoked(self) -> str:
        """Zset: leases an operator took from a holder that may still run the task (claim,
        release_task) -> their expiry, until the old run is over (see lua/_revoke.lua)."""
        return self.base + "revoked"

    @property
    def claimto(self) -> str:
        """Hash: a revoked lease -> the consumer its task was claimed for."""
        return self.base + "claimto"

    def metrics(self, minute: int) -> str:
        """Hash: per-handler counters and run-time buckets of one minute (minutes since the
        epoch); see core/queue/metrics.py. Written by the engine at ack and fail, with a TTL."""
        return f"{self.base}metrics:{minute}"

    def handoff(self, consumer: str) -> str:
        return f"{self.base}handoff:{consumer}"

    def worker(self, name: str) -> str:
        return f"{self.base}worker:{name}"

    def request(self, rid: str) -> str:
        return f"{self.base}req:{rid}"

    def tasks(self, rid: str) -> str:
        return f"{self.base}req:{rid}:tasks"

    def dead_map(self, rid: str) -> str:
        """Hash: a request's dead task -> the id of its entry in the dead stream."""
        return f"{self.base}req:{rid}:dead"

    def progress(self, rid: str) -> str:
        """Hash: a request's task -> its last progress (JSON), "<task>:log" -> its last log
        lines (JSON); see progress.lua."""
        return f"{self.base}req:{rid}:progress"

    def progress_at(self, rid: str) -> str:
        """Zset: a request's tasks that reported progress -> when they last did (ms)."""
        return f"{self.base}req:{rid}:progress:at"

    def results(self, rid: str) -> str:
        """Hash: a request's task -> its handler's result (JSON); kept as long as the request."""
        return f"{self.base}req:{rid}:results"

    def record(self, kind: str, rid: str) -> str:
        """An application's record of kind `kind` beside request `rid` (core.queue.records)."""
        return f"{self.base}{kind}:{rid}"

    def record_index(self, kind: str) -> str:
        """The records of kind `kind` by time (ms), so they are found without a scan."""
        return f"{self.base}{kind}s"

    def state_index(self, state: str) -> str:
        return f"{self.base}state:{state}"

    def tenant_ready(self, priority: int, handler: str, tenant: str) -> str:
        """Zset: the eligible requests of one tenant and handler at one priority."""
        return f"{self.base}tr:{priority}:{handler}:{tenant}"

    def done_channel(self, rid: str) -> str:
        return f"{self.base}done:{rid}"

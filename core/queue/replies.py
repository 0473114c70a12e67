"""What a Redis error reply means: Redis cannot serve anyone for a while (an outage: BUSY,
LOADING, a failover...), or it refused one command (WRONGTYPE, an id it will not parse...),
which is no outage: Redis is up. The console shows the first as its 503 banner and the second
as a 400 page with the reply; anything that must tell them apart asks here."""

from __future__ import annotations

import redis

from .errors import RedisReplyError, RedisUnavailable

# Error replies that say Redis cannot serve anyone for a while, rather than refusing this one
# command: a script past its time limit, loading its data, a failover, a cluster slot
# without master, no memory, a replica that may not write, a failed save that stops writes.
PASSING_REPLIES = frozenset({"BUSY", "LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN",
                             "OOM", "READONLY", "MISCONF", "NOREPLICAS"})
# redis-py strips the code from these and says it with the class instead.
PASSING_CLASSES = (redis.exceptions.ReadOnlyError, redis.exceptions.OutOfMemoryError,
                   redis.exceptions.ClusterDownError, redis.exceptions.TryAgainError)


def _reply(exception: BaseException) -> redis.ResponseError | None:
    """The error reply of Redis behind `exception` (the engine chains it as the cause)."""
    seen: BaseException | None = exception
    while seen is not None:
        if isinstance(seen, redis.ResponseError):
            return seen
        seen = seen.__cause__
    return None


def passing(exception: BaseException) -> bool:
    """Whether an error reply says Redis cannot serve anyone for a while (an outage), not
    that it refused this one command."""
    reply = _reply(exception)
    if reply is None:
        return True  # the engine said "refused" without the reply: assume the worst
    if isinstance(reply, PASSING_CLASSES):
        return True
    return str(reply).split(" ", 1)[0] in PASSING_REPLIES


def engine_error(exception: Exception) -> Exception:
    """A redis-py error that reached the caller untranslated as the engine's own
    (RedisUnavailable, or RedisReplyError with the reply as its cause); anything else as
    it is."""
    if isinstance(exception, redis.ConnectionError | redis.TimeoutError):
        return RedisUnavailable(f"Redis is unreachable ({exception})")
    if isinstance(exception, redis.ResponseError):
        translated = RedisReplyError(f"Redis refused the operation ({exception})")
        translated.__cause__ = exception
        return translated
    return exception

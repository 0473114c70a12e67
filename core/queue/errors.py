"""The root of the project's one exception tree, and the engine's subtree: everything the
engine raises is a QueueError.

    QueueadminError                   every exception the project raises
    ├── QueueError                    the engine (core.queue), schedules (core.queue.schedule)
    ├── WorkerError                   the worker runtime and what handlers raise to steer it
    ├── PipelineError                 data jobs (core.pipeline)
    ├── OpsError                      operator actions (core.ops)
    ├── CliError                      the commands' own refusals (core.cli)
    ├── ConsoleError                  the console (core.console, core.views)
    └── StackError                    the embedded stack (core.stack, core.stack.redis_server)

The engine is the bottom layer, so the root lives here; tests/stack/test_exception_tree.py checks
that every exception class of the project descends from its layer's root."""

from __future__ import annotations


class QueueadminError(Exception):
    """Root of every exception the project raises."""


class QueueError(QueueadminError):
    """Root of every error the engine raises."""


class InvalidInput(QueueError, ValueError):
    """An argument was refused before anything was sent to Redis."""


class PayloadTooLarge(InvalidInput):
    """A task payload is larger than the queue's limit; `index` is its place in the batch."""

    def __init__(self, message: str, *, index: int = -1, size: int = 0) -> None:
        super().__init__(message)
        self.index = index
        self.size = size


class InvalidResult(InvalidInput):
    """A handler's return value cannot be kept as its task's result: not JSON-serialisable
    (or NaN/Infinity, which JSON cannot hold). Failing the task again would fail the same
    way, so the worker dead-letters it at once."""


class ResultTooLarge(InvalidResult):
    """A handler's result is larger, as JSON, than the queue's cap (`max_result_bytes`)."""

    def __init__(self, message: str, *, size: int = 0, limit: int = 0) -> None:
        super().__init__(message)
        self.size = size
        self.limit = limit


class UnknownRequest(QueueError, LookupError):
    """No request with this id exists in this queue (never submitted, or expired)."""


class RequestSealed(QueueError):
    """Tasks cannot be added: the request is sealed, cancelled or finished."""


class RequestCancelled(QueueError):
    """The request was cancelled; the operation does not apply to it any more."""


class LeaseLost(QueueError):
    """The lease is no longer held (expired, reaped, claimed or already finished)."""


class StateChanged(QueueError):
    """What the caller saw has changed (an operator's page out of date, a second click): the
    entry has another holder or was delivered again, the worker beat again. Nothing was done."""


class NotLeased(StateChanged):
    """The task is not leased to anyone, so it cannot be claimed or released."""


class UnknownWorker(QueueError, LookupError):
    """No worker of this name is in the queue's registry."""


class HandlerNotRun(QueueError):
    """A task was to be given to a worker that does not run its handler (an operator's claim
    for it): refused, since that worker could only give it back."""


class RequestIdTaken(QueueError):
    """A request id asked for a new request (a flow's follow-up) is an existing request's."""


class TotalMismatch(QueueError):
    """A resumed add found the request's total moved: someone else appended meanwhile."""


class RedisReplyError(QueueError):
    """Redis answered with an error (BUSY running another client's script, LOADING, OOM, a
    cluster failover...). Usually passing: workers back off and carry on."""


class RedisUnavailable(QueueError, ConnectionError):
    """Redis could not be reached or answered with an error."""


# Integer codes returned by the Lua scripts (see each script's header).
CODES: dict[int, type[QueueError]] = {
    -1: LeaseLost,
    -2: UnknownRequest,
    -3: RequestSealed,
    -4: RequestCancelled,
    -5: NotLeased,
    -6: TotalMismatch,
    -7: StateChanged,
    -8: UnknownWorker,
    -10: RequestIdTaken,  # -9 is progress.lua's invalid input (Consumer.progress)
    -11: HandlerNotRun,
}


def check_code(reply: object, context: str) -> None:
    """Raise the exception mapped to a script's refusal code, if the reply is one."""
    if isinstance(reply, int) and reply < 0:
        raise CODES.get(reply, QueueError)(context)


class InvalidPayload(InvalidInput):
    """A task cannot be sent as JSON as it is (not serialisable, or NaN/Infinity, which JSON
    cannot hold); `index` is its place in the batch."""

    def __init__(self, message: str, *, index: int = -1) -> None:
        super().__init__(message)
        self.index = index


class UnknownHandlerWarning(UserWarning):
    """A request names a handler that no worker of its queue has announced: a typo, or a
    producer that starts before its workers. Its tasks wait until such a worker comes."""

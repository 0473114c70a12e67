"""What the service layer raises; the engine's RedisUnavailable passes through as it is."""

from __future__ import annotations

from core.queue import QueueadminError


class OpsError(QueueadminError):
    """Root of the service layer's refusals; the message is for the operator."""


class Refused(OpsError, PermissionError):
    """The actor lacks the action's permission. The refusal was audited."""


class StaleState(OpsError):
    """What the page showed has changed (a worker beat again, was reclaimed already); nothing
    was done. The attempt was audited."""


class BadInput(OpsError, ValueError):
    """Unknown queue, malformed or unknown ids, a filter that is not one: nothing was done."""


class NotFound(BadInput):
    """What the action names does not exist (a queue, a request, a bulk action, a schedule, an
    alert rule...): nothing was done. Bad input as far as a command's exit status goes; the
    HTTP API answers 404."""


class AuditUnavailable(OpsError):
    """The audit log's database cannot be reached: nothing was done."""

"""The alerts' exceptions: one subtree of the project's (QueueadminError), as every layer has."""

from __future__ import annotations

from core.queue import QueueadminError


class AlertsError(QueueadminError):
    """The root of what core.alerts raises."""

"""The HTTP API's tokens (issue 38, core.ops.tokens): per user, with a scope and an expiry,
stored as a SHA-256 digest of the secret (the secret itself is shown once, at creation), and
the counter of the per-token rate limit."""

from __future__ import annotations

from django.conf import settings
from django.db import models

SCOPES = ("read", "operate", "admin")  # each allows what the one before it does, and more


class ApiToken(models.Model):
    """One token. Its text is `qa_<prefix>_<secret>`: `prefix` finds the row, the SHA-256 of
    the whole text must equal `digest`. A revoked or expired token is refused at its next
    call (every call reads this row)."""

    name = models.CharField(max_length=100, unique=True)  # audited as "token:<name>"
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="api_tokens")
    scope = models.CharField(max_length=10, choices=[(s, s) for s in SCOPES])
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64)  # hex SHA-256 of the token's text
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, default="")  # the actor who created it
    expires_at = models.DateTimeField(null=True, blank=True)  # None: never
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # The rate limit: calls counted in the current minute (a fixed window, kept in this row so
    # that every gunicorn process shares it without Redis or a shared cache).
    window = models.BigIntegerField(default=0)  # minutes since the epoch
    window_calls = models.PositiveIntegerField(default=0)

    class Meta:
        permissions = [
            # The HTTP API's submit of a request (issue 38): granted by migration 0020.
            ("submit_request", "Can submit requests"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.scope}, {self.user})"

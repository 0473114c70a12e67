from __future__ import annotations

from typing import Any

from django.apps import AppConfig


def _audit_failed_login(sender: Any, **kwargs: Any) -> None:
    # Imported here, not at start-up: a management command never needs the login's modules.
    from core.console.login import audit_failed_login

    audit_failed_login(sender, **kwargs)


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Queue admin"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_login_failed

        # Every failed login is an audit entry (core/console/login.py).
        user_login_failed.connect(_audit_failed_login, dispatch_uid="core.audit_failed_login")
        # OpenTelemetry, if the OTEL_* settings ask for it (issue 38; docs/tracing.md): nothing
        # of it is imported otherwise.
        from core import tracing

        tracing.setup_from_env()

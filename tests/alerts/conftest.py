"""The alerts' tests (core/alerts, core/ops/alerts.py, the Alerts page, `manage.py alert`):
conditions evaluated on a real Redis and database, messages sent to real local receivers
(tests/alerts_support.py), and a real `runservices` killed mid-send.

Here: the receivers as fixtures, and Django pointed at them (email through the SMTP server,
links to a console address of the test's own)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from core.queue import Queue
from tests.alerts_support import Receiver, SmtpReceiver


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
def smtp(settings: Any) -> Iterator[SmtpReceiver]:
    """A local SMTP server, and Django's real SMTP backend pointed at it (the test runner's
    default is the in-memory outbox, which no receiver would see)."""
    s = SmtpReceiver()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", s.port
    settings.EMAIL_USE_TLS = settings.EMAIL_USE_SSL = False
    yield s
    s.stop()


@pytest.fixture
def alerting(console: Queue, db: Any, settings: Any) -> Queue:
    """The console's queue, the database, and links in messages to a known console."""
    settings.CONSOLE_URL = "http://console.test:8000"
    return console


@pytest.fixture
def admin(db: Any) -> Any:
    """A Client logged in as ada, in the admin group (core.manage_alerts among the rest)."""
    from tests.console_support import logged_in_client

    return logged_in_client("ada", "admin")

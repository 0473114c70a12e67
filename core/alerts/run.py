"""The alerts' two loops in the services process (`manage.py runservices`): `alerts`
evaluates every rule each QA_ALERT_EVERY_S seconds and writes what it finds into the outbox;
`alerts-send` delivers the outbox. Apart, so that a receiver slow to answer (each attempt may
take up to channels.timeout_s()) never delays an evaluation, nor a slow pass a message; the
evaluator wakes the sender as soon as a rule's messages are queued.

Neither stops on Redis or database trouble: one log line when it starts, one when it ends, a
capped backoff meanwhile (the mirror's way), so that the rest of the services process goes on.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from django.conf import settings
from django.db import DatabaseError, connections

from .evaluate import evaluate_all
from .sender import prune, send_due

log = logging.getLogger("queueadmin.alerts")
SEND_IDLE_S = 1.0  # the sender looks at the outbox at least this often (console tests...)
PRUNE_EVERY_S = 600.0
BACKOFF_FIRST_S, BACKOFF_CAP_S = 0.5, 30.0


class Trouble:
    """A loop's errors: logged when they start and when they end; a capped backoff."""

    def __init__(self, loop: str) -> None:
        self.loop, self.kind, self.tries = loop, "", 0

    def failed(self, exc: Exception) -> float:
        kind = "database error" if isinstance(exc, DatabaseError) else type(exc).__name__
        if kind != self.kind:
            self.kind = kind
            log.exception("%s: %s: %s; retrying with backoff up to %.0fs", self.loop, kind,
                          exc, BACKOFF_CAP_S)
        self.tries += 1
        if isinstance(exc, DatabaseError):
            _close_db()
        return float(min(BACKOFF_FIRST_S * 2 ** (self.tries - 1), BACKOFF_CAP_S))

    def recovered(self) -> None:
        if self.kind:
            log.warning("%s: working again after %s", self.loop, self.kind)
        self.kind, self.tries = "", 0


def run_evaluator(stop: threading.Event, wake: threading.Event | None = None, *,
                  every_s: float | None = None) -> None:
    """Evaluate every enabled rule each `every_s` (settings.ALERT_EVERY_S) until `stop`."""
    every = float(every_s if every_s is not None else settings.ALERT_EVERY_S)
    trouble = Trouble("alerts")
    while not stop.is_set():
        started = time.monotonic()
        try:
            done = evaluate_all(queued=wake.set if wake is not None else None)
            trouble.recovered()
        except Exception as exc:  # logged; a crash would stop the whole services process
            stop.wait(trouble.failed(exc))
            continue
        if done.fired or done.resolved:
            log.info("alerts: %d fired, %d resolved, %d messages queued", done.fired,
                     done.resolved, done.messages)
        _tidy_db()
        stop.wait(max(0.0, every - (time.monotonic() - started)))


def run_sender(stop: threading.Event, wake: threading.Event | None = None, *,
               idle_s: float = SEND_IDLE_S) -> None:
    """Deliver the outbox until `stop`: at once while rows are due, else when woken or
    every `idle_s`."""
    trouble = Trouble("alerts-send")
    next_prune = 0.0
    while not stop.is_set():
        try:
            out = send_due()
            if time.monotonic() >= next_prune:
                prune()
                next_prune = time.monotonic() + PRUNE_EVERY_S
            trouble.recovered()
        except Exception as exc:  # logged; a crash would stop the whole services process
            stop.wait(trouble.failed(exc))
            continue
        _tidy_db()
        if out.sent and not out.waiting:
            continue  # more may be due
        if wake is None:
            stop.wait(idle_s)
        elif wake.wait(idle_s):
            wake.clear()


def _tidy_db() -> None:
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close_if_unusable_or_obsolete()


def _close_db() -> None:
    for conn in connections.all(initialized_only=True):
        with contextlib.suppress(DatabaseError):
            conn.close()

"""What one evaluation pass reads: each queue's figures read once however many rules ask (a
pass of twenty rules on one queue costs one stats read, not twenty), and the shapes the
conditions answer in."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings
from django.urls import reverse
from django.utils.http import urlencode

from core.conf import get_queue, redis_client
from core.queue import Queue, RedisReplyError, RedisUnavailable, read

from .errors import AlertsError

T = TypeVar("T")
LIVE_WORKER_MS = 15_000  # as the console's overview counts a worker live
OLDEST_CHECKED = 20  # the oldest active requests looked at for waiting work (as the overview)


class Unknown(AlertsError):
    """A condition cannot be told now (Redis does not answer): its incidents stay as they
    are, neither fired nor resolved."""


@dataclass(frozen=True)
class Finding:
    """The condition holds about `subject` now. `resolved`: what its recovery message says
    once it no longer holds. For an event condition, `seen_at` is its last occurrence."""

    subject: str
    summary: str
    resolved: str
    url: str = ""
    value: float | None = None
    count: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    started_at: dt.datetime | None = None
    seen_at: dt.datetime | None = None


@dataclass
class Outcome:
    """A condition's answer: what holds now, and for an open incident that it no longer
    reports, why (else its finding's `resolved` text is the recovery message)."""

    found: list[Finding] = field(default_factory=list)
    why_resolved: dict[str, str] = field(default_factory=dict)
    cursor: int | None = None  # new-fingerprint: where the next pass reads from


def link(name: str, *args: str, queue: str | None = None) -> str:
    """An absolute link to a console page (settings.CONSOLE_URL)."""
    path = reverse(f"core:{name}", args=args)
    query = f"?{urlencode({'queue': queue})}" if queue is not None else ""
    return f"{settings.CONSOLE_URL}{path}{query}"


class Look:
    """The reads of one pass, each done once; a Redis failure is an Unknown for every
    condition that needs Redis (and the reason, for redis-down)."""

    def __init__(self, now: dt.datetime | None = None) -> None:
        from django.utils import timezone

        self.now = now or timezone.now()
        self._memo: dict[tuple[str, ...], Any] = {}
        self.redis_error: str | None = None

    @property
    def now_ms(self) -> int:
        return int(self.now.timestamp() * 1000)

    def _once(self, key: tuple[str, ...], read_it: Callable[[], T]) -> T:
        if key not in self._memo:
            if self.redis_error is not None:
                raise Unknown(self.redis_error)
            try:
                self._memo[key] = read_it()
            except (RedisUnavailable, RedisReplyError) as exc:
                self.redis_error = f"{type(exc).__name__}: {exc}"
                raise Unknown(self.redis_error) from exc
        value: T = self._memo[key]
        return value

    def queue(self, name: str) -> Queue:
        return get_queue(name)

    def queues(self, only: str = "") -> list[str]:
        """[only], or every queue of the registry."""
        if only:
            return [only]
        return self._once(("queues",), lambda: read.queues(redis_client(),
                                                           prefix=settings.QUEUE_PREFIX))

    def stats(self, name: str) -> read.QueueStats:
        return self._once(("stats", name), lambda: read.stats(
            self.queue(name), worker_timeout_ms=LIVE_WORKER_MS))

    def attention(self, name: str) -> read.Attention:
        return self._once(("attention", name), lambda: read.attention(
            self.queue(name), checked=OLDEST_CHECKED))

    def health(self) -> read.RedisHealth:
        return self._once(("health",), lambda: read.redis_health(redis_client()))

    def reads(self, key: tuple[str, ...], read_it: Callable[[], T]) -> T:
        """Any other engine read, once per pass, under `key`."""
        return self._once(key, read_it)

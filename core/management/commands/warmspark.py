"""Warm a Spark Connect server with a first job (the stack runs it once after starting its
own server), so that a person's first data job does not pay for the JVM's compilation.
Meanwhile Redis says "Spark warming" (core.queue.spark_warming): the console and `datajob
submit` tell whoever queues a data job then that it waits for Spark."""

from __future__ import annotations

import time
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError

from core.cli import bad_input
from core.management.base import QueueadminCommand

# How long the notice outlives a warm-up that died without removing it (its first job took
# 8-50 s on the machines measured).
WARM_TTL_S = 600.0


class Command(QueueadminCommand):
    help = "Wait for a Spark Connect server, then run a first job on it (what `runstack` does)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--url", required=True, help="sc://host:port of the server")
        parser.add_argument("--timeout", type=float, default=180.0,
                            help="seconds to wait for the server to listen (default 180)")

    def handle(self, *args: Any, **options: Any) -> None:
        from core.pipeline import server, spark_target
        from core.procs import wait_listening
        from core.queue import spark_warming

        url = options["url"]
        try:
            if not url.startswith("sc://"):
                raise ValueError(url)
            host, port = spark_target.parse_url(url)
        except (IndexError, ValueError):
            raise bad_input(f"--url {url!r}: expected sc://host:port") from None
        if not 0 < options["timeout"] <= 86_400:
            raise bad_input(f"--timeout {options['timeout']:g}: seconds, more than 0 and at "
                            "most 86400")
        started = time.monotonic()
        since_ms = int(time.time() * 1000)
        self._say(url, spark_warming.STARTING, options["timeout"] + WARM_TTL_S, since_ms)
        try:
            if not wait_listening(host, port, timeout=options["timeout"]):
                raise CommandError(f"the Spark Connect server at {url} did not listen within "
                                   f"{options['timeout']:g} s")
            listening_s = time.monotonic() - started
            self._say(url, spark_warming.FIRST_JOB, WARM_TTL_S, since_ms)
            took = server.warm(url, settings.VAR_DIR / "spark" / "warm")
        finally:
            self._say(url, None, 0, since_ms)
        self.stdout.write(f"spark is warm: listening after {listening_s:.1f} s, first job "
                          f"{took:.1f} s")

    def _say(self, url: str, phase: str | None, ttl_s: float, since_ms: int) -> None:
        """Mark the warm-up in Redis (None: it is over). Without Redis the warm-up goes on:
        only the notice is missing."""
        from core.conf import redis_client
        from core.queue import QueueError, spark_warming

        try:
            if phase is None:
                spark_warming.clear(redis_client(), prefix=settings.QUEUE_PREFIX)
            else:
                spark_warming.mark(redis_client(), prefix=settings.QUEUE_PREFIX, url=url,
                                   phase=phase, ttl_s=ttl_s, since_ms=since_ms)
        except QueueError as exc:
            self.stderr.write(f"warning: cannot say in Redis that Spark is warming ({exc})")

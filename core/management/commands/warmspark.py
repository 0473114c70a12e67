"""Warm a Spark Connect server with a first job (the stack runs it once after starting its
own server), so that a person's first data job does not pay for the JVM's compilation."""

from __future__ import annotations

import time
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from core.pipeline import server


class Command(BaseCommand):
    help = "Wait for a Spark Connect server, then run a first job on it (what `runstack` does)."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--url", required=True, help="sc://host:port of the server")
        parser.add_argument("--timeout", type=float, default=180.0,
                            help="seconds to wait for the server to listen (default 180)")

    def handle(self, *args: Any, **options: Any) -> None:
        url = options["url"]
        try:
            host, port = server.parse_url(url)
        except (IndexError, ValueError):
            raise CommandError(f"--url {url!r}: expected sc://host:port") from None
        started = time.monotonic()
        if not server.wait_listening(host, port, timeout=options["timeout"]):
            raise CommandError(f"the Spark Connect server at {url} did not listen within "
                               f"{options['timeout']:g} s")
        listening_s = time.monotonic() - started
        took = server.warm(url, settings.VAR_DIR / "spark" / "warm")
        self.stdout.write(f"spark is warm: listening after {listening_s:.1f} s, first job "
                          f"{took:.1f} s")

"""Run the single-machine stack in the foreground (what `make run` does)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import bad_input, raw_stream
from core.management.base import QueueadminCommand
from core.stack.supervisor import WORKER_SLOTS, WORKERS, run_stack


class Command(QueueadminCommand):
    help = (
        "Start the embedded redis-server (unless REDIS_URL is set), migrate, collect static "
        "files, ensure the admin user, serve the console with gunicorn and run workers until "
        "Ctrl-C."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--host", help="address to serve on (default: HOST or 127.0.0.1)")
        parser.add_argument("--port", type=int, help="port to serve on (default: PORT or 8000)")
        parser.add_argument("--workers", type=int, default=WORKERS,
                            help=f"runworker processes on the default queue (default {WORKERS})")
        parser.add_argument("--slots", type=int, default=WORKER_SLOTS,
                            help=f"task slots of each worker (default {WORKER_SLOTS})")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["workers"] < 0:
            raise bad_input("--workers must be 0 or more")
        if options["slots"] < 1:
            raise bad_input("--slots must be 1 or more")
        run_stack(
            host=options["host"], port=options["port"], out=raw_stream(self.stdout),
            workers=options["workers"], slots=options["slots"],
        )

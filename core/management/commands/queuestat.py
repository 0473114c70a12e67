"""Queue depths at a glance: `manage.py queuestat [--queue Q ...] [--json]`."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import raw_stream
from core.cli.queuestat import queuestat
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = (
        "Depths (waiting per priority, leased, delayed, dead), requests per state, live "
        "workers and totals of one or more queues."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--queue", "-q", action="append", default=[],
            help="queue name; repeat for several (default: every registered queue)",
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args: Any, **options: Any) -> None:
        queuestat(options["queue"], as_json=options["json"], stdout=raw_stream(self.stdout))

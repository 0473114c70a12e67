"""`manage.py pause --queue Q [--dry-run]`: workers lease nothing from the queue; running
tasks finish."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, add_actor_option, raw_stream
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = ("Pause a queue: workers lease nothing from it until it is resumed. Audited with "
            "the OS user (or --as) as the actor.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--queue", "-q", required=True)
        parser.add_argument("--dry-run", action="store_true",
                            help="say whether it would change anything; change nothing")
        add_actor_option(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli.ops import switch

        switch(action="pause", queue=o["queue"], dry_run=o["dry_run"],
               out=raw_stream(self.stdout), actor=actor_option(o["as_user"]))

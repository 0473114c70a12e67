"""`manage.py cancel [--queue Q] RID ... [--dry-run]`: requests deliver no more tasks."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, add_actor_option, raw_stream
from core.conf import DEFAULT_QUEUE
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = ("Cancel requests: waiting tasks are dropped, running ones told to stop. Audited "
            "with the OS user (or --as) as the actor.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--queue", "-q", default=DEFAULT_QUEUE)
        parser.add_argument("ids", nargs="+", metavar="RID", help="request ids (at most 1,000)")
        parser.add_argument("--dry-run", action="store_true",
                            help="print how many it would cancel; change nothing")
        add_actor_option(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli.ops import cancel

        cancel(queue=o["queue"], ids=o["ids"], dry_run=o["dry_run"],
               out=raw_stream(self.stdout), actor=actor_option(o["as_user"]))

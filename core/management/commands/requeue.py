"""`manage.py requeue [--queue Q] (--id DEAD_ID ... | --request RID | --fingerprint F |
--handler H) [--since ISO-TIME] [--dry-run]`: dead letters back to waiting."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, add_actor_option, raw_stream
from core.conf import DEFAULT_QUEUE
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = (
        "Requeue dead letters (attempts reset; a failed request reopens): by id, all of one "
        "request, or every letter of a fingerprint group or handler the database's history "
        "holds now. Audited with the OS user (or --as) as the actor."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--queue", "-q", default=DEFAULT_QUEUE)
        parser.add_argument("--id", dest="ids", nargs="+", default=[], metavar="DEAD_ID",
                            help="dead-letter ids (at most 1,000)")
        parser.add_argument("--request", help="every dead letter of this request")
        parser.add_argument("--fingerprint", help="every dead letter of this error group")
        parser.add_argument("--handler", help="every dead letter of this handler")
        parser.add_argument("--since", help="with --fingerprint/--handler: letters dead at or "
                                            "after this ISO time (UTC unless it says)")
        parser.add_argument("--dry-run", action="store_true",
                            help="print how many it would requeue; change nothing")
        add_actor_option(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli.ops import requeue

        requeue(queue=o["queue"], ids=o["ids"], request=o["request"],
                fingerprint=o["fingerprint"], handler=o["handler"], since=o["since"],
                dry_run=o["dry_run"], out=raw_stream(self.stdout), actor=actor_option(o["as_user"]))

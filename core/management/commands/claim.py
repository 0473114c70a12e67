"""`manage.py claim --request RID --task TID ... --from CONSUMER --to CONSUMER [--min-idle MS]
[--queue Q] [--dry-run]`: move leased tasks to another live worker."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, add_actor_option, raw_stream
from core.conf import DEFAULT_QUEUE
from core.management.base import QueueadminCommand

ACTION = "claim"


def add_entry_options(parser: ArgumentParser) -> None:
    parser.add_argument("--queue", "-q", default=DEFAULT_QUEUE)
    parser.add_argument("--request", required=True, help="the request the tasks belong to")
    parser.add_argument("--task", dest="tasks", nargs="+", required=True, metavar="TID",
                        help="task ids (stream ids such as 1700000000000-0)")
    parser.add_argument("--from", dest="holder", required=True, metavar="CONSUMER",
                        help="the consumer that holds them now; a task held by another one "
                             "is skipped")
    parser.add_argument("--min-idle", type=int, default=0, metavar="MS",
                        help="skip a task delivered again less than MS ago (default 0)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print how many it would move; change nothing")
    add_actor_option(parser)


class Command(QueueadminCommand):
    help = ("Claim pending entries: leased tasks move to another live worker (no attempt "
            "spent). Audited with the OS user (or --as) as the actor.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_entry_options(parser)
        parser.add_argument("--to", required=True, metavar="CONSUMER",
                            help="the live worker that takes them")

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli.ops import move

        move(action=ACTION, queue=o["queue"], request=o["request"], tasks=o["tasks"],
             holder=o["holder"], to=o["to"], min_idle_ms=o["min_idle"], dry_run=o["dry_run"],
             out=raw_stream(self.stdout), actor=actor_option(o["as_user"]))

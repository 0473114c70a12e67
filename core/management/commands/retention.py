"""`manage.py retention show|set|unset`: how long the database keeps each kind of history.

    manage.py retention show [--json]
    manage.py retention set requests 30d              # every queue without its own
    manage.py retention set audit 400d --queue billing
    manage.py retention unset audit --queue billing   # back to every queue's

KIND: requests, dead, search, audit, bulk, datajobs, handler-minutes, handler-hours;
DURATION: 30d, 12h, 90s, 15m, 2w, 1d12h or forever (docs/retention.md).
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, add_actor_option, raw_stream
from core.management.base import QueueadminCommand

KINDS_HELP = ("requests, dead, search, audit, bulk, datajobs, handler-minutes or "
              "handler-hours")


class Command(QueueadminCommand):
    help = ("How long the database keeps each kind of history, per queue: show, set, unset. "
            "Changes are audited with the OS user (or --as) as the actor; the services "
            "process's pruner applies them at its next pass (`manage.py prune`: now).")

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        show = sub.add_parser("show", help="every kind's retention, where it comes from, and "
                                           "the pruner's last pass")
        show.add_argument("--json", action="store_true", help="print JSON instead of a table")
        put = sub.add_parser("set", help="keep KIND for DURATION (in every queue, or --queue)")
        put.add_argument("kind", metavar="KIND", help=KINDS_HELP)
        put.add_argument("duration", metavar="DURATION",
                         help="30d, 12h, 90s, 15m, 2w, 1d12h, or forever")
        unset = sub.add_parser("unset", help="take back what was set for KIND (in every "
                                             "queue, or --queue): the settings apply again")
        unset.add_argument("kind", metavar="KIND", help=KINDS_HELP)
        for p in (put, unset):
            p.add_argument("--queue", "-q", help="this queue only (default: every queue "
                                                 "without a setting of its own)")
            add_actor_option(p)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli import retention as cli  # the service layer: not for `--help`

        out = raw_stream(self.stdout)
        if o["action"] == "show":
            cli.show(out=out, as_json=o["json"])
        else:
            cli.change(o["action"], o["kind"], o.get("duration"), queue=o["queue"], out=out,
                       actor=actor_option(o["as_user"]))

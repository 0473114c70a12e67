"""`manage.py limit set|show|remove`: limits on keys, decided inside the lease (docs/limits.md).

    manage.py limit set api --on resource=payments-api --rate 100/1s
    manage.py limit set per-tenant --on tenant=acme --concurrency 4 --queue billing
    manage.py limit set reports --on handler=report --rate 600/1m --concurrency 8
    manage.py limit set whole --on queue --rate 1000/1s
    manage.py limit show [--queue Q] [--json]
    manage.py limit remove api
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, add_actor_option, raw_stream
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = ("A queue's limits on keys: show, set, remove. A limit caps how many tasks of a key "
            "are leased at once (--concurrency) and/or how many start per period (--rate); "
            "changes are audited with the OS user (or --as) and apply at the next dequeue.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        show = sub.add_parser("show", help="every limit with its use now")
        show.add_argument("--queue", "-q", help="this queue only (default: every queue)")
        show.add_argument("--json", action="store_true", help="print JSON instead of a table")
        put = sub.add_parser("set", help="create or change the limit NAME")
        put.add_argument("name", metavar="NAME", help="the limit's name")
        put.add_argument("--on", required=True, metavar="KEY",
                         help="handler=H, tenant=T, queue, field=F (each value of the payload "
                              "field F its own key) or resource=R")
        put.add_argument("--rate", metavar="N/PERIOD",
                         help="at most N tasks start per PERIOD (1s, 10s, 1m, 1h, 500ms)")
        put.add_argument("--concurrency", metavar="N",
                         help="at most N tasks of the key leased at once")
        rm = sub.add_parser("remove", help="remove the limit NAME")
        rm.add_argument("name", metavar="NAME")
        for p in (put, rm):
            p.add_argument("--queue", "-q", help="the queue (default: default)")
            add_actor_option(p)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli import limits as cli  # the service layer: not for `--help`

        out = raw_stream(self.stdout)
        if o["action"] == "show":
            cli.show(out=out, queue=o["queue"], as_json=o["json"])
        elif o["action"] == "set":
            cli.set_limit(o["name"], o["on"], rate=o["rate"], concurrency=o["concurrency"],
                          queue=o["queue"], out=out, actor=actor_option(o["as_user"]))
        else:
            cli.remove(o["name"], queue=o["queue"], out=out, actor=actor_option(o["as_user"]))

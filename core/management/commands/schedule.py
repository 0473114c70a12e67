"""`manage.py schedule add|list|show|pause|resume|remove|run-now|restore`: recurring schedules.

    manage.py schedule add nightly --cron "30 2 * * *" --tz Europe/Berlin \\
        --handler aggregate '{"day": "yesterday"}'
    manage.py schedule add poll --every 10m --handler poll '{}'
    manage.py schedule restore --dry-run     # after Redis lost its data: what comes back
"""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import CommandParser

from core.cli import actor_option, add_actor_option, raw_stream
from core.management.base import QueueadminCommand
from core.queue.schedule.spec import DEFAULT_MISSED_MAX, MISSED, OVERLAP


class IntermixedParser(CommandParser):
    """Task payloads may follow the options, as in `add NAME --cron ... --handler H '{}'`:
    plain argparse would take the payloads' positional as empty at NAME, then refuse them."""

    _inside = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._inside:
            return super().parse_known_args(args, namespace)
        self._inside = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inside = False


class Command(QueueadminCommand):
    help = ("Recurring schedules: add, list, show, pause, resume, remove, run-now, restore. "
            "Changes are audited with the OS user (or --as) as the actor.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION",
                                    parser_class=IntermixedParser)
        add = sub.add_parser("add", help="create a schedule (--update: change one)")
        add.add_argument("name")
        add.add_argument("tasks", nargs="*", metavar="TASK_JSON",
                         help="the task payloads each run submits, as `submit` takes them")
        add.add_argument("--file", "-f", metavar="FILE", help="JSON-lines file of tasks")
        when = add.add_mutually_exclusive_group(required=True)
        when.add_argument("--cron", metavar="EXPR", help='cron expression, e.g. "30 2 * * *"')
        when.add_argument("--every", metavar="INTERVAL", help="interval: 90s, 10m, 1h30m, 1d")
        add.add_argument("--tz", default="UTC", help="IANA time zone of --cron (default UTC)")
        add.add_argument("--start", metavar="TIME", help="no run before (ISO 8601)")
        add.add_argument("--end", metavar="TIME", help="no run after (ISO 8601)")
        add.add_argument("--handler", help="the handler that runs each task")
        add.add_argument("--job", metavar="JSON",
                         help="a data job's spec instead of tasks; its output may use {date}, "
                              "{time}, {datetime}, {slot}")
        add.add_argument("--missed", choices=MISSED, default="latest",
                         help="after downtime: run the latest missed slot once (default), all "
                              "of them (up to --missed-max), or none")
        add.add_argument("--missed-max", type=int, default=DEFAULT_MISSED_MAX)
        add.add_argument("--overlap", choices=OVERLAP, default="skip",
                         help="skip a slot while the previous run is still running (default), "
                              "or allow runs side by side")
        add.add_argument("--description", default="")
        add.add_argument("--update", action="store_true", help="change an existing schedule")
        for opt in ("priority", "concurrency", "max-attempts"):
            add.add_argument(f"--{opt}", type=int)
        add.add_argument("--tenant")
        for name in ("list", "show", "pause", "resume", "remove", "run-now"):
            p = add if name == "add" else sub.add_parser(name)
            if name != "list":
                p.add_argument("name")
            p.add_argument("--queue", "-q", help="queue (default: default)")
            if name not in ("list", "show"):
                add_actor_option(p)
        add.add_argument("--queue", "-q", help="queue (default: default)")
        add_actor_option(add)
        restore = sub.add_parser(
            "restore", help="after Redis lost its data: declare again, from the database, "
            "every schedule missing from Redis that no operator removed (never overwrites)")
        restore.add_argument("--queue", "-q", help="only this queue (default: every queue)")
        restore.add_argument("--dry-run", action="store_true",
                             help="list what would be restored; change nothing")
        add_actor_option(restore)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli import schedule as cli  # the service layer: not for `--help`

        out = raw_stream(self.stdout)
        action = o["action"]
        if action == "add":
            schedule = cli.build(
                o["name"], queue=o["queue"], cron=o["cron"], every=o["every"], tz=o["tz"],
                handler=o["handler"], task_args=o["tasks"], file=o["file"], job=o["job"],
                start=o["start"], end=o["end"], missed=o["missed"], missed_max=o["missed_max"],
                overlap=o["overlap"], description=o["description"],
                options={"priority": o["priority"], "concurrency": o["concurrency"],
                         "max_attempts": o["max_attempts"], "tenant": o["tenant"]})
            cli.add(schedule, out=out, actor=actor_option(o["as_user"]), update=o["update"])
        elif action == "list":
            cli.listing(queue=o["queue"], out=out)
        elif action == "show":
            cli.show(o["name"], queue=o["queue"], out=out)
        elif action == "restore":
            cli.restore(queue=o["queue"], dry_run=o["dry_run"], out=out,
                        actor=actor_option(o["as_user"]))
        else:
            cli.change(action, o["name"], queue=o["queue"], out=out,
                       actor=actor_option(o["as_user"]))

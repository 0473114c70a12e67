"""`manage.py worker quiet|stop|resume NAME [--queue Q] [--wait S]`: ask a running worker
to take no new task (quiet), to finish its running tasks and exit (stop), or to take tasks
again (resume), as the console's workers page does; it acts at its next heartbeat."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, add_actor_option, raw_stream
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = ("Quiet (take no new task, finish the running ones), stop (then exit) or resume a "
            "running worker, named as the workers page and its logs name it. It acts at its "
            "next heartbeat. Audited with the OS user (or --as) as the actor.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("command", choices=["quiet", "stop", "resume"])
        parser.add_argument("name", help="the worker's name (runworker --name)")
        parser.add_argument("--queue", "-q", default=None,
                            help="a queue it serves (default: look in every queue)")
        parser.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                            help="wait up to SECONDS until it has done it (quiet or resumed "
                                 "by its heartbeat, or gone after a stop); exit 1 if not")
        add_actor_option(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli.workers import control

        control(command=o["command"], worker=o["name"], queue=o["queue"], wait=o["wait"],
                out=raw_stream(self.stdout), actor=actor_option(o["as_user"]))

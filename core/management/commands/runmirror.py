"""`manage.py runmirror [-q QUEUE ...] [--burst]`: keep the database's history of the queues."""

from __future__ import annotations

import logging
import signal
import threading
from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.cli import command_errors
from core.conf import get_queue
from core.mirror import MirrorConfig, run_mirror
from core.queue.keys import validate_id


class Command(BaseCommand):
    help = (
        "Mirror the queues' events and dead letters into the database (requests, dead letters "
        "with fingerprints, counter samples for the charts). SIGTERM/SIGINT stop it."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--queue", "-q", action="append", default=[],
                            help="queue to follow; repeat for several (default: every queue "
                                 "in the registry, followed as new ones appear)")
        parser.add_argument("--burst", action="store_true",
                            help="apply everything there is, then exit")
        parser.add_argument("--group", default="mirror",
                            help="consumer group on the streams (default mirror); one process "
                                 "per group")
        parser.add_argument("--batch", type=int, default=1000,
                            help="stream entries read per round trip (default 1000)")
        parser.add_argument("--log-level", default="INFO",
                            choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    def handle(self, *args: Any, **options: Any) -> None:
        logging.getLogger("queueadmin").setLevel(options["log_level"])
        if not 1 <= options["batch"] <= 100_000:
            raise CommandError("--batch must be between 1 and 100000")
        with command_errors("runmirror"):
            queues = tuple(dict.fromkeys(validate_id(q, "queue name") for q in options["queue"]))
            validate_id(options["group"], "group name")
            config = MirrorConfig(queues=queues, group=options["group"],
                                  batch=options["batch"], burst=options["burst"])
            stop = threading.Event()
            previous = {s: signal.signal(s, lambda *_: stop.set())
                        for s in (signal.SIGTERM, signal.SIGINT)}
            try:
                totals = run_mirror(config, get_queue, stop=stop)
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        if options["burst"]:
            self.stdout.write(
                f"mirrored {totals.events} events ({totals.requests} request rows written), "
                f"{totals.dead_letters} dead letters from {len(totals.queues)} queues"
                + (f"; reconciled {totals.reconciled} requests after {totals.gaps} gaps"
                   if totals.gaps else "")
            )

"""`manage.py runmirror [-q QUEUE ...] [--burst] [--processes N | --consumer NAME]`: keep the
database's history of the queues."""

from __future__ import annotations

import logging
import signal
import threading
from argparse import ArgumentParser
from typing import Any

from core.cli import bad_input, command_errors
from core.conf import get_queue
from core.management.base import QueueadminCommand
from core.procs import set_from_signal
from core.queue.keys import validate_id

# MirrorConfig.batch's value, said here so that --help imports nothing of the mirror (a test
# compares them).
BATCH = 4000


class Command(QueueadminCommand):
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
                            help="consumer group on the streams (default mirror): the mirrors "
                                 "of one group share the work and write one database")
        parser.add_argument("--processes", type=int, default=1,
                            help="run as N processes, consumers of the group (default 1): this "
                                 "one and N-1 it starts, and starts again if they die")
        parser.add_argument("--consumer", default="",
                            help="this process's name in the group (default: the group's); "
                                 "several runmirror with their own names share the work")
        parser.add_argument("--claim-after", type=float, default=10.0,
                            help="seconds after which entries another consumer of the group "
                                 "left pending (it died) are taken over (default 10)")
        parser.add_argument("--no-housekeeping", action="store_true",
                            help="leave the samples, metrics, schedules and refresh to another "
                                 "mirror of the group")
        parser.add_argument("--batch", type=int, default=BATCH,
                            help="stream entries read per round trip, applied in one "
                                 f"transaction (default {BATCH})")
        parser.add_argument("--log-level", default="INFO",
                            choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    def handle(self, *args: Any, **options: Any) -> None:
        from core.mirror import MirrorConfig, run_mirror

        logging.getLogger("queueadmin").setLevel(options["log_level"])
        if not 1 <= options["batch"] <= 100_000:
            raise bad_input("--batch must be between 1 and 100000")
        if not 1 <= options["processes"] <= 64:
            raise bad_input("--processes must be between 1 and 64")
        if not 0.5 <= options["claim_after"] <= 3600:
            raise bad_input("--claim-after must be between 0.5 and 3600 seconds")
        if options["processes"] > 1 and options["burst"]:
            raise bad_input("--processes and --burst do not go together: a burst is one process")
        with command_errors("runmirror"):
            queues = tuple(dict.fromkeys(validate_id(q, "queue name") for q in options["queue"]))
            validate_id(options["group"], "group name")
            consumer = options["consumer"]
            if consumer:
                validate_id(consumer, "consumer name")
            n = options["processes"]
            if n > 1:
                consumer = f"{consumer or options['group']}-0"
            config = MirrorConfig(queues=queues, group=options["group"],
                                  batch=options["batch"], burst=options["burst"],
                                  consumer=consumer, claim_after_s=options["claim_after"],
                                  housekeeping=not options["no_housekeeping"])
            stop = threading.Event()
            previous = {s: signal.signal(s, set_from_signal(stop))
                        for s in (signal.SIGTERM, signal.SIGINT)}
            children = self._children(options, consumer, n)
            try:
                totals = run_mirror(config, get_queue, stop=stop)
            finally:
                if children is not None:
                    children.close()
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        if options["burst"]:
            self.stdout.write(
                f"mirrored {totals.events} events ({totals.requests} request rows written), "
                f"{totals.dead_letters} dead letters from {len(totals.queues)} queues"
                + (f"; reconciled {totals.reconciled} requests after {totals.gaps} gaps"
                   if totals.gaps else "")
            )

    def _children(self, options: dict[str, Any], consumer: str, n: int) -> Any:
        """With --processes N: the N-1 other mirror processes, started."""
        if n <= 1:
            return None
        from core.mirror.processes import Children, child_argv

        base = [a for q in options["queue"] for a in ("-q", q)]
        base += ["--group", options["group"], "--batch", str(options["batch"]),
                 "--claim-after", str(options["claim_after"]),
                 "--log-level", options["log_level"]]
        stem = consumer.rsplit("-", 1)[0]
        children = Children([child_argv(base, f"{stem}-{i}") for i in range(1, n)])
        children.start()
        return children

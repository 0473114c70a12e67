"""`manage.py runscheduler [-q QUEUE ...] [--burst]`: fire the recurring schedules' slots."""

from __future__ import annotations

import logging
import signal
import threading
from argparse import ArgumentParser
from typing import Any

from django.conf import settings

from core.cli import command_errors
from core.conf import redis_client
from core.management.base import QueueadminCommand
from core.procs import set_from_signal
from core.queue.keys import validate_id


class Command(QueueadminCommand):
    help = (
        "Fire the recurring schedules of every queue (or of --queue) each second. Any number "
        "may run at once: each slot fires exactly once. SIGTERM/SIGINT stop it."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--queue", "-q", action="append", default=[],
                            help="queue whose schedules to fire; repeat for several (default: "
                                 "every queue in the registry)")
        parser.add_argument("--burst", action="store_true",
                            help="one tick (fire what is due now), then exit")
        parser.add_argument("--log-level", default="INFO",
                            choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    def handle(self, *args: Any, **options: Any) -> None:
        from core.ops.datajobs import submit_slot
        from core.queue.schedule.scheduler import Scheduler

        logging.getLogger("queueadmin").setLevel(options["log_level"])
        with command_errors("runscheduler"):
            queues = tuple(dict.fromkeys(validate_id(q, "queue name") for q in options["queue"]))
            scheduler = Scheduler(redis_client(), prefix=settings.QUEUE_PREFIX, queues=queues,
                                  submit_job=submit_slot)
            stop = threading.Event()
            previous = {s: signal.signal(s, set_from_signal(stop))
                        for s in (signal.SIGTERM, signal.SIGINT)}
            try:
                totals = scheduler.run(stop, max_ticks=1 if options["burst"] else None)
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)
        r = totals.report
        self.stdout.write(f"{totals.ticks} ticks: fired {r.fired} slots, skipped {r.skipped}, "
                          f"{r.errors} errors, took over {r.recovered} claims")

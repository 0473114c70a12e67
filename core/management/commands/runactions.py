"""`manage.py runactions [--burst]`: run the console's bulk actions, chunk by chunk."""

from __future__ import annotations

import logging
import signal
import threading
from argparse import ArgumentParser
from typing import Any

from core.cli import command_errors
from core.management.base import QueueadminCommand
from core.procs import set_from_signal


class Command(QueueadminCommand):
    help = ("Run the bulk actions operators confirmed (requeue, delete, cancel of a preview's "
            "snapshot), at most 1,000 targets per call into Redis, at their rate, until "
            "stopped. SIGTERM/SIGINT stop it between chunks. One per database.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--burst", action="store_true",
                            help="run what is running now to its end, then exit")
        parser.add_argument("--log-level", default="INFO",
                            choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    def handle(self, *args: Any, **options: Any) -> None:
        from core.ops.runner import run_actions

        logging.getLogger("queueadmin").setLevel(options["log_level"])
        stop = threading.Event()
        previous = {s: signal.signal(s, set_from_signal(stop))
                    for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            with command_errors("runactions"):
                run_actions(burst=options["burst"], stop=stop)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

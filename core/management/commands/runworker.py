"""`manage.py runworker`: run tasks from one or more queues until stopped."""

from __future__ import annotations

import logging
from argparse import ArgumentParser
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

from core.cli import bad_input
from core.conf import get_queue, redacted
from core.management.base import QueueadminCommand
from core.queue import InvalidInput, QueueError, RedisUnavailable


class Command(QueueadminCommand):
    help = (
        "Run a worker: lease tasks from the given queues, run their handlers, ack or fail them. "
        "SIGTERM/SIGINT stop it gracefully (a second signal releases running tasks at once)."
    )

    own_process = False  # run from the command line: the process is this worker's

    def run_from_argv(self, argv: list[str]) -> None:
        self.own_process = True
        super().run_from_argv(argv)

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--queue", "-q", action="append", default=[],
                            help="queue to serve; repeat for several (default: default)")
        parser.add_argument("--slots", type=int, default=1,
                            help="tasks run at once in this process (threads; default 1)")
        parser.add_argument("--name", default=None,
                            help="worker name (default: host-pid-random)")
        parser.add_argument("--burst", action="store_true",
                            help="exit 0 once nothing is waiting, delayed or leased")
        parser.add_argument("--max-tasks", type=int, default=None,
                            help="exit 0 after this many tasks")
        parser.add_argument("--dead-after", type=float, default=10.0,
                            help="seconds without a heartbeat before this worker's tasks are "
                                 "given to others (default 10)")
        parser.add_argument("--prefetch", type=int, default=256,
                            help="most tasks leased per slot at once; batches grow toward it "
                                 "only while a batch holds under 20 ms of work (default 256; "
                                 "1 = never prefetch)")
        parser.add_argument("--grace", type=float, default=30.0,
                            help="seconds to let running tasks finish on SIGTERM (default 30)")
        parser.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                            help="hard limit per task run: past it the task is failed (retried "
                                 "or dead-lettered) even if its handler is stuck in native "
                                 "code (default: none; a handler's own time_limit wins)")
        parser.add_argument("--heartbeat", choices=["process", "thread"], default="process",
                            help="renew leases from a small child process (default; survives "
                                 "handlers that hold the GIL) or from a thread")
        parser.add_argument("--import", dest="imports", action="append", default=[],
                            metavar="MODULE",
                            help="import MODULE to register its handlers; repeat for several "
                                 "(added to settings.QUEUEADMIN_HANDLER_MODULES)")
        parser.add_argument("--log-level", default="INFO",
                            choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    def handle(self, *args: Any, **options: Any) -> None:
        # The worker's modules are imported here: `runworker --help` answers at once.
        from core.pipeline import spark_target
        from core.worker import WorkerConfig
        from core.worker.main import run_worker

        logging.getLogger("queueadmin").setLevel(options["log_level"])
        try:
            config = WorkerConfig(
                **({"name": options["name"]} if options["name"] else {}),
                slots=options["slots"], prefetch=options["prefetch"],
                dead_after=options["dead_after"], grace=options["grace"],
                burst=options["burst"], max_tasks=options["max_tasks"],
                time_limit=options["time_limit"], heartbeat=options["heartbeat"],
            )
        except ValueError as exc:
            raise bad_input(str(exc)) from exc
        try:  # a bad SPARK_CONF would fail every data task: refused before any is taken
            spark_target.parse_conf(getattr(settings, "SPARK_CONF", ""))
        except spark_target.SparkConfError as exc:
            raise bad_input(str(exc)) from exc
        try:
            run_worker(
                options["queue"] or ["default"], get_queue, config,
                handler_modules=[*settings.QUEUEADMIN_HANDLER_MODULES, *options["imports"]],
                exit_process=True, freeze_start=self.own_process,
            )
        except RedisUnavailable as exc:
            raise CommandError(
                f"{exc}; REDIS_URL is {redacted(settings.REDIS_URL)}: start the stack with "
                "`make run`, or set REDIS_URL to a running Redis."
            ) from exc
        except (InvalidInput, ImportError, ImproperlyConfigured) as exc:  # what it was given
            raise bad_input(str(exc)) from exc
        except (QueueError, RuntimeError) as exc:
            raise CommandError(str(exc)) from exc

"""`queueadmin runservices`: the mirror, the bulk actions' runner, the scheduler, the reaper,
the pruner (retention, every QA_PRUNE_EVERY_S) and the alerts (their evaluation every
QA_ALERT_EVERY_S, and their outbox's sender: docs/alerts.md), each a thread of one process.
What the stack runs: one Python and Django of ~90 MiB instead of three (`runmirror`,
`runactions` and `runscheduler` still run each alone; `prune` is one pass of the pruner)."""

from __future__ import annotations

import logging
import signal
import threading
from argparse import ArgumentParser
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connections

from core.conf import get_queue, redis_client
from core.management.base import QueueadminCommand
from core.procs import set_from_signal

log = logging.getLogger("queueadmin.services")
JOIN_POLL_S = 0.5  # the main thread wakes to take signals while the loops run


class Command(QueueadminCommand):
    help = ("Run the mirror (the database's history of every queue), the bulk actions' runner, "
            "the recurring schedules' scheduler, the reaper of every queue's expired leases, "
            "the pruner (retention) and the alerts (rules evaluated, messages sent) in one "
            "process, until SIGTERM/SIGINT. If one of them "
            "stops on an error, the others stop too and the command fails, so that a "
            "supervisor starts them again.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--log-level", default="INFO",
                            choices=["DEBUG", "INFO", "WARNING", "ERROR"])

    def handle(self, *args: Any, **options: Any) -> None:
        from core.alerts.run import run_evaluator, run_sender
        from core.mirror import MirrorConfig, run_mirror
        from core.mirror.retention_prune import run_pruner
        from core.ops.datajobs import submit_slot
        from core.ops.runner import run_actions
        from core.queue.reaper import Reaper
        from core.queue.schedule.scheduler import Scheduler

        logging.getLogger("queueadmin").setLevel(options["log_level"])
        stop = threading.Event()
        failed: list[str] = []
        scheduler = Scheduler(redis_client(), prefix=settings.QUEUE_PREFIX,
                              submit_job=submit_slot)
        reaper = Reaper(redis_client(), get_queue, prefix=settings.QUEUE_PREFIX)
        wake = threading.Event()
        loops: dict[str, Callable[[], object]] = {
            "mirror": lambda: run_mirror(MirrorConfig(), get_queue, stop=stop),
            "actions": lambda: run_actions(stop=stop),
            "scheduler": lambda: scheduler.run(stop),
            # Expired and revoked leases move on even on a queue with no live worker.
            "reaper": lambda: reaper.run(stop),
            "pruner": lambda: run_pruner(stop=stop, every_s=lambda: settings.PRUNE_EVERY_S),
            # The alert rules' evaluation, and their outbox's delivery (apart: a slow
            # receiver never delays an evaluation); the first wakes the second.
            "alerts": lambda: run_evaluator(stop, wake),
            "alerts-send": lambda: run_sender(stop, wake),
        }

        def run(name: str, loop: Callable[[], object]) -> None:
            try:
                loop()
                if not stop.is_set():
                    failed.append(f"{name} returned")
            except Exception as exc:  # reported; the supervisor restarts us
                log.exception("%s stopped on an error", name)
                failed.append(f"{name}: {type(exc).__name__}: {exc}")
            finally:
                stop.set()
                connections.close_all()  # this thread's own database connections

        previous = {s: signal.signal(s, set_from_signal(stop))
                    for s in (signal.SIGTERM, signal.SIGINT)}
        threads = [threading.Thread(target=run, args=item, name=item[0], daemon=True)
                   for item in loops.items()]
        try:
            for t in threads:
                t.start()
            while any(t.is_alive() for t in threads):
                for t in threads:
                    t.join(JOIN_POLL_S)
        finally:
            stop.set()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        if failed:
            raise CommandError("runservices stopped: " + "; ".join(failed))

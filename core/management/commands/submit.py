"""Submit one request: `manage.py submit '{"n": 1}' '{"n": 2}' --priority 80 --wait`."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from django.core.management.base import BaseCommand

from core.cli import raw_stream
from core.cli.due import add_due_options, due_from
from core.cli.submit import submit


class Command(BaseCommand):
    help = (
        "Submit a request: tasks as JSON arguments (a bare word is taken as a JSON string) "
        "and/or a JSON-lines file. Prints the request id; with --wait, follows it to the end."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("tasks", nargs="*", metavar="TASK_JSON", help="one task per argument")
        parser.add_argument(
            "--file", "-f", metavar="FILE", help="JSON-lines file, one task per line (- = stdin)"
        )
        parser.add_argument("--queue", "-q", help="queue name (default: default)")
        parser.add_argument("--priority", "-p", type=int, help="0-99, higher first (default 50)")
        parser.add_argument("--concurrency", "-c", type=int, help="max tasks running at once")
        parser.add_argument("--tenant", help="client the request belongs to (fair share)")
        parser.add_argument(
            "--handler", help="the handler that runs each task (required): one the queue's "
            "workers announced"
        )
        parser.add_argument(
            "--any-handler", action="store_true",
            help="submit even if no worker announced --handler yet (producers that start first)",
        )
        parser.add_argument("--max-attempts", type=int, help="attempts before dead letter (3)")
        parser.add_argument("--request-id", help="id to use; resubmitting an id changes nothing")
        parser.add_argument(
            "--wait", action="store_true", help="show progress; fail unless the request ends done"
        )
        parser.add_argument("--timeout", type=float, metavar="S", help="give up waiting after S s")
        parser.add_argument(
            "--print-results", action="store_true",
            help="with --wait: print each task's result after the id, one JSON line each "
            '({"task": ID, "result": VALUE}, in task order)',
        )
        add_due_options(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        submit(
            options["tasks"],
            file=options["file"],
            queue=options["queue"],
            priority=options["priority"],
            concurrency=options["concurrency"],
            tenant=options["tenant"],
            handler=options["handler"],
            any_handler=options["any_handler"],
            max_attempts=options["max_attempts"],
            request_id=options["request_id"],
            wait=options["wait"],
            timeout=options["timeout"],
            print_results=options["print_results"],
            due=due_from(options["due_in"], options["due_at"]),
            stdout=raw_stream(self.stdout),
            stderr=raw_stream(self.stderr),
        )

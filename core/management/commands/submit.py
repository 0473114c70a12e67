"""Submit one request: `manage.py submit '{"n": 1}' '{"n": 2}' --priority 80 --wait`."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import raw_stream
from core.cli.due import add_due_options, due_from
from core.cli.submit import submit, unique_from
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
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
        parser.add_argument(
            "--resource", action="append", default=[], metavar="R",
            help="a named resource its tasks use (repeatable): the limits on R apply to them",
        )
        parser.add_argument(
            "--unique-key", metavar="K",
            help="while another request holds K, submit nothing and print that request's id",
        )
        parser.add_argument(
            "--unique-scope", metavar="SCOPE",
            help="how long a request holds its key: waiting (until its first task starts), "
            "active (until it completes; the default) or done+DURATION (e.g. done+1h)",
        )
        parser.add_argument(
            "--on-duplicate", choices=("return", "replace", "delay"),
            help="what a duplicate does: return the holder (default), replace its tasks while "
            "none has started, or delay a scheduled holder to this submit's due time (debounce)",
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
            resources=options["resource"],
            unique=unique_from(options["unique_key"], options["unique_scope"],
                               options["on_duplicate"]),
            stdout=raw_stream(self.stdout),
            stderr=raw_stream(self.stderr),
        )

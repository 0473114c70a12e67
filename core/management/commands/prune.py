"""`manage.py prune [--export-audit FILE] [--json]`: one pass of the pruner, now, printing what
it removed (the services process runs one every QA_PRUNE_EVERY_S on its own)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, add_actor_option, raw_stream
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = ("Remove now what each kind's retention no longer keeps (`manage.py retention "
            "show`), in small batches, and print what went. Audit entries are written out as "
            "JSON lines first (QA_AUDIT_EXPORT, or --export-audit). Audited with the OS user "
            "(or --as) as the actor.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--export-audit", metavar="FILE",
                            help="append the audit entries removed to FILE as JSON lines "
                                 "(default: QA_AUDIT_EXPORT's monthly files, var/audit/)")
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
        add_actor_option(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli.retention import prune

        prune(out=raw_stream(self.stdout), export_audit=o["export_audit"], as_json=o["json"],
              actor=actor_option(o["as_user"]))

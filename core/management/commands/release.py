"""`manage.py release --request RID --task TID ... --from CONSUMER [--min-idle MS] [--queue Q]
[--dry-run]`: leased tasks back to waiting, without spending an attempt, once the runs they are
taken from have stopped (or their leases expired)."""

from __future__ import annotations

from argparse import ArgumentParser
from typing import Any

from core.cli import actor_option, raw_stream
from core.management.base import QueueadminCommand

from .claim import add_entry_options


class Command(QueueadminCommand):
    help = ("Release pending entries: leased tasks go back to waiting (no attempt spent) once "
            "their holders have stopped running them or their leases expired. Audited with the "
            "OS user (or --as) as the actor.")

    def add_arguments(self, parser: ArgumentParser) -> None:
        add_entry_options(parser)

    def handle(self, *args: Any, **o: Any) -> None:
        from core.cli.ops import move

        move(action="release", queue=o["queue"], request=o["request"], tasks=o["tasks"],
             holder=o["holder"], to=None, min_idle_ms=o["min_idle"], dry_run=o["dry_run"],
             out=raw_stream(self.stdout), actor=actor_option(o["as_user"]))

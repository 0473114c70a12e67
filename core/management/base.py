"""The base of the project's management commands: a command answers at once, and says in one
line what went wrong.

Django runs its system checks before a command unless the command says otherwise, and the
checks import the URLconf, so every view of the console, and through them the data pipeline
and sqlglot: a second or more before a `queuestat` could answer. The checks are run where
they matter: by `manage.py check`, by `migrate` (which `runstack` runs at every start) and by
the console's server. A command imports what it uses when it uses it
(tests/ops/test_cli_startup.py holds both).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from core.cli import bad_input
from core.queue.errors import InvalidInput, QueueadminError


class QueueadminCommand(BaseCommand):
    requires_system_checks: list[str] = []

    def execute(self, *args: Any, **options: Any) -> Any:
        # What a command's own code translates says more; this is the net under it, so that
        # a refusal it missed is still one line (and `--traceback` still shows where).
        try:
            return super().execute(*args, **options)
        except (InvalidInput, ImproperlyConfigured) as exc:  # what it was given, or the settings
            raise bad_input(str(exc)) from exc
        except QueueadminError as exc:
            raise CommandError(str(exc)) from exc

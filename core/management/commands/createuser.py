"""manage.py createuser NAME --role viewer|operator|admin: a console account; prints its
generated password once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.cli import actor_option, add_actor_option
from core.console.users import ROLES, UserError, create_user


class Command(BaseCommand):
    help = ("Create a console user in the viewer, operator or admin group; prints its password "
            "once. Audited with the OS user (or --as) as the actor.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--role", required=True, help=f"one of {', '.join(ROLES)}")
        add_actor_option(parser)

    def handle(self, *args: Any, name: str, role: str, **options: Any) -> None:
        try:
            password = create_user(name, role, actor_option(options["as_user"]))
        except UserError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"created {role} {name!r}; password (shown once): {password}")

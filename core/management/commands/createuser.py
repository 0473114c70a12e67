"""manage.py createuser NAME --role viewer|operator|admin: a console account; prints its
generated password once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from core.cli import actor_option, add_actor_option, bad_input
from core.console.users import ROLES, UserError, create_user, name_problem
from core.management.base import QueueadminCommand


class Command(QueueadminCommand):
    help = ("Create a console user in the viewer, operator or admin group; prints its password "
            "once. Audited with the OS user (or --as) as the actor.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--role", required=True, choices=ROLES)
        add_actor_option(parser)

    def handle(self, *args: Any, name: str, role: str, **options: Any) -> None:
        from django.contrib.auth.models import User

        # What was typed is checked here (exit 2); create_user checks it again, with the
        # actor's permission and the groups (a refusal there exits 1).
        if (why := name_problem(name)) is not None:
            raise bad_input(why)
        if User.objects.filter(username=name).exists():
            raise bad_input(f"a user named {name!r} already exists")
        try:
            password = create_user(name, role, actor_option(options["as_user"]))
        except UserError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"created {role} {name!r}; password (shown once): {password}")

"""Console accounts: a user in the viewer, operator or admin group, with a generated password.
An admin may also use the Django admin (/admin/: is_staff), where it sees the history and the
audit log and runs the admin actions its permissions allow."""

from __future__ import annotations

import secrets

from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.db import transaction

from core.console.errors import ConsoleError
from core.ops import audit
from core.ops.audit import Actor, os_actor

ROLES = ("viewer", "operator", "admin")
ADD_PERMISSION = "auth.add_user"
ADD_ACTION = "user-add"  # as the Django admin's "add user" is audited (core/admin.py)


class UserError(ConsoleError):
    """A user that cannot be made as asked; the message says why."""


def name_problem(name: str) -> str | None:
    """What is wrong with `name` as a user name, by Django's own rule (the admin's form
    applies it: at most 150 of letters, digits and @.+-_; a "../x" or a 300-character name
    got in otherwise); None if nothing."""
    if not name.strip():
        return "the user name must not be empty"
    try:
        User._meta.get_field("username").run_validators(name)
    except ValidationError as exc:
        return f"user name {name[:60]!r}: {' '.join(exc.messages)}"
    return None


def create_user(name: str, role: str, actor: Actor | None = None) -> str:
    """Create user `name` in group `role`; returns its generated password (shown once). One
    audit entry (action "user-add"), the OS user (or `actor`) as the actor; an actor without
    the permission to add users is refused, and the refusal recorded."""
    actor = actor or os_actor()
    target = f"user {name!r}, role {role}"
    if not audit.may(actor, ADD_PERMISSION):
        audit.record(actor, ADD_ACTION, "", target=target, count=1, refused=True,
                     error=f"{actor.name} lacks the permission {ADD_PERMISSION}")
        raise UserError(f"{actor.name} may not create users: it needs the permission "
                        f"{ADD_PERMISSION} (the refusal was recorded)")
    if role not in ROLES:
        raise UserError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    if (why := name_problem(name)) is not None:
        raise UserError(why)
    if User.objects.filter(username=name).exists():
        raise UserError(f"a user named {name!r} already exists")
    try:
        group = Group.objects.get(name=role)
    except Group.DoesNotExist:
        raise UserError(f"the {role} group is missing: run `manage.py migrate` first") from None
    password = secrets.token_urlsafe(15)
    with transaction.atomic():
        user = User.objects.create_user(name, password=password, is_staff=role == "admin")
        user.groups.add(group)
        audit.record(actor, ADD_ACTION, "", target=target, count=1, acted=1)
    return password

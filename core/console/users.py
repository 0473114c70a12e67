"""Console accounts: a user in the viewer, operator or admin group, with a generated password.
An admin may also use the Django admin (/admin/: is_staff), where it sees the history and the
audit log and runs the admin actions its permissions allow."""

from __future__ import annotations

import secrets

from django.contrib.auth.models import Group, User
from django.db import transaction

ROLES = ("viewer", "operator", "admin")


class UserError(Exception):
    """A user that cannot be made as asked; the message says why."""


def create_user(name: str, role: str) -> str:
    """Create user `name` in group `role`; returns its generated password (shown once)."""
    if role not in ROLES:
        raise UserError(f"unknown role {role!r}: use one of {', '.join(ROLES)}")
    if not name.strip():
        raise UserError("the user name must not be empty")
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
    return password

"""Who acts, and the audit log: one AuditEntry per run of an action (or its refusal)."""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from core.models import AuditEntry, BulkAction

SOURCES = ("console", "admin", "cli", "api")
TARGET_IDS_SHOWN = 50  # ids written into an entry's target; the count says how many in all


@dataclass(frozen=True)
class Actor:
    """Who acts: a console or admin user, or an OS user at the command line (user None), or
    an HTTP API token ("token:<name>", its user, source "api", and its scope, which narrows
    the user's permissions: core.ops.perms.scope_allows)."""

    name: str
    user: Any = None
    source: str = "console"
    scope: str | None = None


def as_actor(who: Any, source: str = "console") -> Actor:
    """An Actor as it is, or one made of a Django user (what the console's views pass)."""
    if isinstance(who, Actor):
        return who
    if who is None or not getattr(who, "is_authenticated", False):
        return Actor("anonymous", None, source)
    return Actor(who.get_username(), who, source)


def os_actor() -> Actor:
    """The person running a management command: "os:<login name>"."""
    try:
        login = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        import os

        login = f"uid{os.getuid()}"
    return Actor(f"os:{login}", None, "cli")


def cli_actor(name: str | None = None) -> Actor:
    """The actor of a management command: the OS user, or with `--as NAME` the console user
    NAME (active), whose permissions then apply as they would in the console. BadInput if
    there is no such user."""
    if not name:
        return os_actor()
    from django.contrib.auth import get_user_model

    from .errors import BadInput

    user = get_user_model().objects.filter(username=name).first()
    if user is None or not user.is_active:
        raise BadInput(f"--as {name!r}: there is no active console user of that name "
                       "(leave --as out to act as the OS user)")
    return Actor(user.get_username(), user, "cli")


def require_log() -> None:
    """AuditUnavailable unless the audit log can be reached (a database, migrated): an action
    from the command line that could leave no entry is not done."""
    from django.db import DatabaseError

    from .errors import AuditUnavailable

    try:
        AuditEntry.objects.filter(pk=0).exists()
    except DatabaseError as exc:
        raise AuditUnavailable(f"the audit log cannot be written ({exc}): run `manage.py "
                               "migrate` (`make run` does), or set DATABASE_URL to the "
                               "console's database") from exc


def may(actor: Actor, permission: str) -> bool:
    """Whether `actor` holds `permission`. A command line user may do everything: whoever
    can run manage.py holds the database's and Redis' credentials anyway."""
    from .perms import scope_allows

    if actor.source == "cli" and actor.user is None:
        return True
    user = actor.user
    return bool(user is not None and user.is_active and user.has_perm(permission)
                and scope_allows(actor.scope, permission))


def describe_ids(ids: list[str]) -> str:
    shown = ", ".join(ids[:TARGET_IDS_SHOWN])
    more = len(ids) - TARGET_IDS_SHOWN
    return f"{shown} and {more:,} more" if more > 0 else shown


def record(
    actor: Actor,
    action: str,
    queue: str,
    *,
    target: str,
    count: int,
    acted: int = 0,
    skipped: int = 0,
    refused: bool = False,
    error: str = "",
    bulk: BulkAction | None = None,
) -> AuditEntry:
    """Write one audit entry. Its text is kept as given but for NUL, which PostgreSQL refuses
    in any text (a 500 for an action whose bad input was being recorded): U+FFFD in its place."""
    return AuditEntry.objects.create(
        actor=_kept(actor.name[:200]), user=actor.user, source=actor.source, action=action,
        queue=_kept(queue[:200]), target=_kept(target), count=count, acted=acted,
        skipped=skipped, refused=refused, error=_kept(error), bulk=bulk,
    )


def _kept(text: str) -> str:
    return text.replace("\x00", "\ufffd")


def entries(
    user: str | None = None,
    action: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    before_id: int | None = None,
    limit: int = 50,
) -> list[AuditEntry]:
    """A page of the audit log, newest first (keyset by id: pass the last row's id as
    `before_id` for the next page). `user` is an actor name ("alice", "os:root")."""
    rows = AuditEntry.objects.select_related("bulk").order_by("-id")
    if user:
        rows = rows.filter(actor=user)
    if action:
        rows = rows.filter(action=action)
    if since is not None:
        rows = rows.filter(at__gte=since)
    if until is not None:
        rows = rows.filter(at__lt=until)
    if before_id is not None:
        rows = rows.filter(id__lt=before_id)
    return list(rows[: max(1, min(limit, 1000))])

"""`manage.py token create|revoke|list`: the HTTP API's tokens (core.ops.tokens)."""

from __future__ import annotations

from typing import TextIO

from django.core.management.base import CommandError

from core.cli import bad_input
from core.ops import tokens
from core.ops.audit import Actor, require_log
from core.ops.errors import BadInput, Refused


def create(actor: Actor, name: str, *, user: str, scope: str, expires: str | None,
           out: TextIO) -> str:
    """Create the token; say what it is, then print its text alone on the last line (it is
    shown this once: only its digest is kept)."""
    require_log()
    try:
        made = tokens.create(actor, name, user=user, scope=scope, expires=expires)
    except BadInput as exc:
        raise bad_input(f"token create: {exc}") from exc
    except Refused as exc:
        raise CommandError(str(exc)) from exc
    t = made.token
    until = f"until {t.expires_at:%Y-%m-%d %H:%M} UTC" if t.expires_at else "with no expiry"
    out.write(f"token {t.name} for {t.user.get_username()}, scope {t.scope}, {until}; it is "
              "shown this once (only its digest is kept):\n")
    out.write(made.text + "\n")
    out.flush()
    return made.text


def revoke(actor: Actor, name: str, *, out: TextIO) -> None:
    require_log()
    try:
        got = tokens.revoke(actor, name)
    except BadInput as exc:
        raise bad_input(f"token revoke: {exc}") from exc
    except Refused as exc:
        raise CommandError(str(exc)) from exc
    t = got.token
    if not got.done:
        out.write(f"token {t.name} was revoked already, at {t.revoked_at:%Y-%m-%d %H:%M:%S} "
                  "UTC: nothing done\n")
        return
    out.write(f"token {t.name} revoked at {t.revoked_at:%Y-%m-%d %H:%M:%S} UTC: every call "
              "with it is refused from now on\n")


def listing(actor: Actor, *, out: TextIO) -> None:
    rows = tokens.listing(actor)
    if not rows:
        out.write("no tokens (manage.py token create NAME --user USER --scope SCOPE)\n")
        return
    out.write(f"{'NAME':<24} {'USER':<16} {'SCOPE':<8} {'STATUS':<8} {'EXPIRES':<17} LAST USED\n")
    for t in rows:
        expires = f"{t.expires_at:%Y-%m-%d %H:%M}" if t.expires_at else "never"
        used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "-"
        out.write(f"{t.name:<24} {t.user.get_username():<16} {t.scope:<8} "
                  f"{tokens.status(t):<8} {expires:<17} {used}\n")

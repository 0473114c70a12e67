"""The HTTP API's tokens (issue 38): create (the text shown once), revoke, list, and the check
of every API call (authenticate): the token's digest, expiry and revocation, its per-token
rate limit, and the actor it acts as.

A token acts as its user, narrowed by its scope (core.ops.perms.scope_allows), and is audited
as "token:<name>" with source "api". Only its SHA-256 digest is stored; its text,
`qa_<prefix>_<secret>`, is returned once by create(). Its own creation and revocation are
audited as the actor who did them ("token-create", "token-revoke").

The rate limit is a fixed window of one minute counted in the token's row (one UPDATE per
call, shared by every server process, no cache or Redis of its own): over
settings.API_RATE_PER_MIN calls in a minute are refused until the next minute begins.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import logging
import re
import secrets
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, OperationalError, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from core.models import ApiToken
from core.models.alert_conditions import BadTerm, parse_duration
from core.models.tokens import SCOPES

from . import audit
from .audit import Actor, as_actor
from .errors import BadInput, NotFound, OpsError, Refused

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
TEXT = re.compile(r"qa_([0-9a-f]{12})_([A-Za-z0-9_-]{20,100})")
DEFAULT_EXPIRY = "90d"
NEVER = ("never", "none", "0")
log = logging.getLogger(__name__)


class TokenRefused(OpsError):
    """No token, a token that is not one, expired, revoked, or whose user is inactive: the
    API answers 401. The message says which, without echoing the token."""


class RateLimited(OpsError):
    """The token made its minute's calls; `retry_after` seconds until the next minute."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Created:
    token: ApiToken
    text: str  # the token itself: shown once, never stored


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _expiry(expires: str | None, now: dt.datetime) -> dt.datetime | None:
    raw = (expires or DEFAULT_EXPIRY).strip().lower()
    if raw in NEVER:
        return None
    try:
        seconds = parse_duration(raw, "--expires")
    except BadTerm as exc:
        raise BadInput(f"{exc} (or never)") from None
    if seconds < 60:  # 0d made a token expired before its first call
        raise BadInput(f"--expires {raw!r}: a token lasts at least a minute (or never)")
    return now + dt.timedelta(seconds=seconds)


def _owner(user: Any) -> Any:
    if isinstance(user, str):
        # A NUL never reaches the database (PostgreSQL refuses it in any text, as a 500).
        found = None if "\x00" in user or len(user) > 150 else (
            get_user_model().objects.filter(username=user).first())
        if found is None or not found.is_active:
            raise BadInput(f"there is no active console user named {user[:100]!r}")
        return found
    return user


def may_manage(actor: Actor, owner: Any) -> bool:
    """A user manages their own tokens; an admin (core.delete_apitoken) everyone's; the
    command line's OS user everything. A token never manages tokens."""
    if actor.source == "api":
        return False
    if actor.source == "cli" and actor.user is None:
        return True
    if actor.user is not None and owner is not None and actor.user.pk == owner.pk:
        return bool(actor.user.is_active)
    return audit.may(actor, "core.delete_apitoken")


def _refuse(actor: Actor, action: str, target: str, why: str) -> Refused:
    audit.record(actor, action, "", target=target, count=1, refused=True, error=why)
    return Refused(f"{actor.name} may not {action.replace('-', ' ')}: {why} (the refusal "
                   "was recorded)")


def create(who: Any, name: str, *, user: Any, scope: str, expires: str | None = None) -> Created:
    """A new token for `user` (a user or a user name): its text, shown once."""
    actor = as_actor(who)
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise BadInput(f"token name {str(name)[:100]!r} is not valid: 1 to 100 letters, "
                       "digits, '.', '_' or '-', starting with a letter or digit")
    if scope not in SCOPES:
        raise BadInput(f"scope {str(scope)[:40]!r} is not one of {', '.join(SCOPES)}")
    owner = _owner(user)
    now = timezone.now()
    expires_at = _expiry(expires, now)
    target = f"token {name} for {owner.get_username()} ({scope})"
    if not may_manage(actor, owner):
        raise _refuse(actor, "token-create", target, "only its user or an admin may")
    prefix = secrets.token_hex(6)
    text = f"qa_{prefix}_{secrets.token_urlsafe(32)}"
    try:
        with transaction.atomic():
            token = ApiToken.objects.create(
                name=name, user=owner, scope=scope, prefix=prefix, digest=digest(text),
                expires_at=expires_at, created_by=actor.name[:200])
    except IntegrityError:
        raise BadInput(f"a token named {name!r} exists already (a revoked one too keeps its "
                       "name, so that token:NAME in the audit log stays its own): choose "
                       "another name") from None
    audit.record(actor, "token-create", "", target=target, count=1, acted=1)
    return Created(token, text)


@dataclass(frozen=True)
class Revoked:
    token: ApiToken
    done: bool  # False: it was revoked already (at token.revoked_at); nothing changed


def revoke(who: Any, name: str) -> Revoked:
    """The token `name` refused from its next call on. Revoking one revoked already changes
    nothing, and says so (`done` False)."""
    actor = as_actor(who)
    valid = isinstance(name, str) and NAME.fullmatch(name) is not None
    token = ApiToken.objects.select_related("user").filter(name=name).first() if valid else None
    if token is None:
        raise NotFound(f"there is no token named {str(name)[:100]!r}")
    target = f"token {token.name} of {token.user.get_username()}"
    if not may_manage(actor, token.user):
        raise _refuse(actor, "token-revoke", target, "only its user or an admin may")
    acted = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now())
    audit.record(actor, "token-revoke", "", target=target, count=1, acted=acted,
                 skipped=1 - acted)
    token.refresh_from_db()
    return Revoked(token, bool(acted))


def listing(who: Any) -> list[ApiToken]:
    """The tokens `who` may see: their own; an admin's (core.view_apitoken) and the command
    line's, everyone's. Newest first."""
    actor = as_actor(who)
    rows = ApiToken.objects.select_related("user").order_by("-created_at", "-id")
    if actor.source == "cli" and actor.user is None:
        return list(rows)
    if actor.user is None or actor.source == "api":
        return []
    if audit.may(actor, "core.view_apitoken"):
        return list(rows)
    return list(rows.filter(user=actor.user))


def status(token: ApiToken, now: dt.datetime | None = None) -> str:
    """active, expired or revoked."""
    now = now or timezone.now()
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at is not None and token.expires_at <= now:
        return "expired"
    return "active"


def authenticate(text: str | None) -> Actor:
    """The actor of an API call made with the token `text`; TokenRefused or RateLimited."""
    match = TEXT.fullmatch(text or "")
    if match is None:
        raise TokenRefused("no valid token: send the header `Authorization: Bearer <token>` "
                           "with a token from `manage.py token create` or the console's "
                           "Tokens page")
    token = ApiToken.objects.select_related("user").filter(prefix=match[1]).first()
    if token is None or not hmac.compare_digest(token.digest, digest(match[0])):
        raise TokenRefused("the token is not valid")
    state = status(token)
    if state != "active":
        raise TokenRefused(f"the token {token.name} is {state}")
    if not token.user.is_active:
        raise TokenRefused(f"the token {token.name}'s user is inactive")
    _count_call(token)
    return Actor(f"token:{token.name}", token.user, "api", token.scope)


def _count_call(token: ApiToken) -> None:
    """One more call in the token's minute (one UPDATE, atomic in the database); RateLimited
    past the limit."""
    limit = int(settings.API_RATE_PER_MIN)
    now = time.time()
    minute = int(now // 60)
    try:
        ApiToken.objects.filter(pk=token.pk).update(
            window_calls=Case(When(window=minute, then=F("window_calls") + 1),
                              default=Value(1)),
            window=minute, last_used_at=timezone.now())
    except OperationalError as exc:  # SQLite busy past its timeout: this call goes uncounted
        log.warning("the API's rate count of token %s was not written: %s", token.name, exc)
        return
    calls = ApiToken.objects.filter(pk=token.pk).values_list("window_calls", flat=True).first()
    if limit > 0 and calls is not None and calls > limit:
        retry = max(1, int((minute + 1) * 60 - now))
        raise RateLimited(f"the token {token.name} made over {limit} calls this minute: "
                          f"retry in {retry} s", retry)

"""Login throttling (django-axes, configured in queueadmin/settings.py) and its audit: every
failed login is an audit entry; too many failures lock logging in for a while, and the login
page says so; unlocking from the command line is audited too (the Django admin's unlock is
audited in core/admin.py).

What too many failures lock (lockout_parameters): always the pair (user name, address). A
user name logging in from an address it logged in from before (LOGIN_KNOWN_ADDRESS_DAYS) is
locked by that pair alone, so nobody elsewhere, and nobody guessing other names from the same
address, can lock it out: a guesser cannot shut an admin out. Any other attempt is also
locked by the user name's failures from every address (guesses spread over many addresses)
and by the address' failures for every name (one address trying many names).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_ip_address, get_client_username
from axes.models import AccessBase, AccessLog
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from core.ops import audit
from core.ops.audit import Actor, os_actor

ACTION = "login"
UNLOCK = "unlock"
WRONG = "wrong user name or password"
LOCKED = "refused: this user name or address is locked out after too many failed logins"
PAIR = ["username", "ip_address"]


class LoginThrottle(AxesStandaloneBackend):
    """Refuses a login while its user name or address is locked out. A call of authenticate()
    without a request (a script, the test client's login()) has no address to throttle by
    and is left to the other backends; every login form passes its request."""

    def authenticate(self, request: HttpRequest | None, username: str | None = None,
                     password: str | None = None, **kwargs: Any) -> None:
        if request is None:
            return None
        super().authenticate(request, username=username, password=password, **kwargs)
        return None


def client_address(request: HttpRequest) -> str | None:
    """The caller's address: the peer's, or behind a trusted proxy (QA_TRUST_X_FORWARDED_FOR)
    the last address of X-Forwarded-For, the one that proxy appended; the earlier ones are
    the caller's to forge."""
    if settings.TRUST_X_FORWARDED_FOR:
        forwarded = request.META.get("HTTP_X_FORWARDED_FOR", "")
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last[:45]
    address = request.META.get("REMOTE_ADDR")
    return str(address) if address else None


def lockout_parameters(request_or_attempt: HttpRequest | AccessBase,
                       credentials: dict[str, Any] | None = None) -> list[str | list[str]]:
    """What failed logins count against this attempt (AXES_LOCKOUT_PARAMETERS): the pair
    (user name, address) alone where that name logged in from that address before, else the
    pair, the name and the address."""
    if isinstance(request_or_attempt, AccessBase):
        username, address = request_or_attempt.username, request_or_attempt.ip_address
        return [PAIR] if _known(username, address) else [PAIR, "username", "ip_address"]
    request = request_or_attempt
    username = get_client_username(request, credentials)
    address = getattr(request, "axes_ip_address", None)
    # axes asks several times per login: one query per request and pair.
    memo: dict[tuple[Any, Any], bool] = request.__dict__.setdefault("_qa_known_pairs", {})
    if (username, address) not in memo:
        memo[(username, address)] = _known(username, address)
    return [PAIR] if memo[(username, address)] else [PAIR, "username", "ip_address"]


def _known(username: object, address: object) -> bool:
    """Whether `username` logged in successfully from `address` within the last
    LOGIN_KNOWN_ADDRESS_DAYS (django-axes' access log of successful logins)."""
    if not (isinstance(username, str) and username and isinstance(address, str) and address):
        return False
    if len(username) > 150 or "\0" in username:
        return False  # no user has such a name (and PostgreSQL refuses a NUL in a query)
    since = timezone.now() - timedelta(days=float(settings.LOGIN_KNOWN_ADDRESS_DAYS))
    return AccessLog.objects.filter(username=username, ip_address=address,
                                    attempt_time__gte=since).exists()


def lockout_message() -> str:
    cool_off: timedelta = settings.AXES_COOLOFF_TIME
    minutes = round(cool_off.total_seconds() / 60)
    return (f"Too many failed logins for this user name or from this address: logging in is "
            f"locked for {minutes} minute{'s' if minutes != 1 else ''} after the last failed "
            "attempt. Only its own failed logins lock a user name out of an address it has "
            "logged in from before. An admin can unlock it sooner (Django admin, Access "
            "attempts).")


def locked_out(request: HttpRequest, original_response: HttpResponse | None = None,
               credentials: dict[str, Any] | None = None) -> HttpResponse:
    """The login page, saying that logging in is locked and for how long (status 429)."""
    context = {"form": AuthenticationForm(request), "locked": lockout_message(),
               "next": request.POST.get("next") or request.GET.get("next") or ""}
    return render(request, "core/login.html", context, status=429)


def audit_failed_login(sender: Any, credentials: dict[str, Any],
                       request: HttpRequest | None = None, **kwargs: Any) -> None:
    """One audit entry per failed login from a form: the actor is the caller's address
    ("ip:ADDRESS": who it is, is what failed), the target the user name tried."""
    if request is None:
        return
    address = get_client_ip_address(request) or "unknown"
    source = "admin" if request.path.startswith("/admin/") else "console"
    username = str(credentials.get("username") or "")[:150]
    # django-axes marks a login it refused for an earlier lockout before this runs (core is
    # before axes in INSTALLED_APPS), and the attempt that reaches the limit after it.
    refused_before = bool(getattr(request, "axes_locked_out", False))
    audit.record(Actor(f"ip:{address}", None, source), ACTION, "",
                 target=f"user name {username!r}", count=1, refused=True,
                 error=LOCKED if refused_before else WRONG)


class AuditedAxesHandler(AxesDatabaseHandler):
    """django-axes' database handler; its resets (`manage.py axes_reset`, `axes_reset_ip`,
    `axes_reset_username`, `axes_reset_ip_username`, `axes_reset_logs`) are audited with the
    OS user as the actor, with how many records each removed (0 when there was nothing to
    remove, as for any action that found nothing to act on)."""

    def user_login_failed(self, sender: Any, credentials: dict[str, Any],
                          request: HttpRequest | None = None, **kwargs: Any) -> None:
        """The attempt is recorded under the user name as a user name can be (150 characters,
        no NUL): a 100 KB or NUL-holding name is a failed login like any other, not a
        database error (PostgreSQL: varchar(255), no NUL in a string)."""
        name = credentials.get("username")
        if isinstance(name, str):
            credentials = {**credentials, "username": name.replace("\0", "\ufffd")[:150]}
        super().user_login_failed(sender, credentials, request, **kwargs)

    def reset_attempts(self, *, ip_address: str | None = None, username: str | None = None,
                       ip_or_username: bool = False) -> int:
        count = int(super().reset_attempts(ip_address=ip_address, username=username,
                                           ip_or_username=ip_or_username))
        joint = " or " if ip_or_username else " and "
        what = joint.join(p for p in (f"user name {username!r}" if username else "",
                                      f"address {ip_address}" if ip_address else "") if p)
        _audit_reset(UNLOCK, f"failed logins of {what or 'everyone'}", count)
        return count

    def reset_logs(self, *, age_days: int | None = None) -> int:
        count = int(super().reset_logs(age_days=age_days))
        older = f" older than {age_days} days" if age_days is not None else ""
        _audit_reset("login-log-reset", f"login log entries{older}", count)
        return count

    def reset_failure_logs(self, *, age_days: int | None = None) -> int:
        count = int(super().reset_failure_logs(age_days=age_days))
        older = f" older than {age_days} days" if age_days is not None else ""
        _audit_reset("login-log-reset", f"failed-login log entries{older}", count)
        return count


def _audit_reset(action: str, target: str, count: int) -> None:
    audit.record(os_actor(), action, "", target=target, count=count, acted=count)

"""Logging in is throttled (django-axes): too many failed logins of one user name, or from
one address, lock it out for a while, whatever password comes next; the login page says so;
an admin unlocks it in the Django admin; every failed login is in the audit log."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import Group, Permission, User
from django.test import Client
from django.utils import timezone

from core.models import AuditEntry
from tests.console_support import ensure_groups

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-pass-phrase-7"
LOCKED = "Too many failed logins for this user name or from this address"


@pytest.fixture
def vic(db: Any, settings: Any) -> User:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast
    ensure_groups()
    u = User.objects.create_user("vic", password=PASSWORD)
    u.groups.add(Group.objects.get(name="viewer"))
    return u


def log_in(username: str, password: str, address: str = "127.0.0.1") -> Any:
    client = Client(REMOTE_ADDR=address)
    response = client.post("/login/", {"username": username, "password": password,
                                       "next": "/"})
    response.logged_in = "_auth_user_id" in client.session
    return response


def test_the_right_password_after_too_many_wrong_ones_is_refused(vic: User,
                                                                 settings: Any) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert log_in("vic", "wrong").status_code == 200
    last = log_in("vic", "wrong")  # the limit: locked from here on
    assert last.status_code == 429 and LOCKED in last.content.decode()
    right = log_in("vic", PASSWORD)
    assert right.status_code == 429 and not right.logged_in
    page = right.content.decode()
    assert LOCKED in page and "locked for 15 minutes" in page
    assert 'name="username"' in page  # still the login page, with its form

    entries = list(AuditEntry.objects.filter(action="login").order_by("id"))
    assert len(entries) == settings.AXES_FAILURE_LIMIT + 1  # each failure, once
    assert {(e.actor, e.target, e.refused) for e in entries} == {
        ("ip:127.0.0.1", "user name 'vic'", True)}
    assert [e.error for e in entries[-2:]] == [
        "wrong user name or password",
        "refused: this user name or address is locked out after too many failed logins"]


def test_one_user_name_is_locked_from_every_new_address(vic: User, settings: Any) -> None:
    """Guesses spread over many addresses (a botnet, an IPv6 block) still lock the name, for
    every address it never logged in from."""
    User.objects.create_user("wendy", password=PASSWORD)
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in("vic", "wrong", address=f"10.0.0.{i}")
    assert not log_in("vic", PASSWORD, address="10.0.9.9").logged_in
    assert log_in("wendy", PASSWORD, address="10.0.9.9").logged_in  # the address is not locked


def test_one_address_is_locked_for_every_new_user_name(vic: User, settings: Any) -> None:
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in(f"guess{i}", "wrong", address="10.6.6.6")
    assert not log_in("vic", PASSWORD, address="10.6.6.6").logged_in
    assert log_in("vic", PASSWORD, address="10.0.0.1").logged_in  # nor is the user name


def test_a_guesser_cannot_lock_an_admin_out_of_an_address_it_logged_in_from(
        vic: User, settings: Any) -> None:
    """Issue 33 (6): five wrong guesses from anywhere used to lock the name for everyone. An
    address a user name logged in from before is locked for it by its own failures only."""
    assert log_in("vic", PASSWORD, address="192.0.2.10").logged_in  # the admin's usual desk
    for i in range(3 * settings.AXES_FAILURE_LIMIT):  # from many addresses, and from one
        assert not log_in("vic", f"guess-{i}", address=f"10.6.{i}.1").logged_in
        assert not log_in("vic", f"guess-{i}", address="10.6.6.6").logged_in
    assert log_in("vic", "guess", address="10.0.9.9").status_code == 429  # a new address
    assert log_in("vic", PASSWORD, address="192.0.2.10").logged_in  # still the way in
    assert not log_in("vic", PASSWORD, address="10.6.6.6").logged_in  # the guesser's is locked


def test_an_address_shared_with_a_guesser_stays_open_to_who_logged_in_from_it(
        vic: User, settings: Any) -> None:
    """Behind one NAT, a guesser at other names locks the address for new names only."""
    assert log_in("vic", PASSWORD, address="10.1.1.1").logged_in
    for i in range(2 * settings.AXES_FAILURE_LIMIT):
        log_in(f"guess{i}", "wrong", address="10.1.1.1")
    User.objects.create_user("newbie", password=PASSWORD)
    assert log_in("newbie", PASSWORD, address="10.1.1.1").status_code == 429
    assert log_in("vic", PASSWORD, address="10.1.1.1").logged_in


def test_its_own_failures_lock_a_user_name_out_of_a_known_address(vic: User,
                                                                  settings: Any) -> None:
    assert log_in("vic", PASSWORD, address="192.0.2.10").logged_in
    assert log_in("vic", PASSWORD, address="192.0.2.11").logged_in
    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in("vic", "wrong", address="192.0.2.10")
    refused = log_in("vic", PASSWORD, address="192.0.2.10")
    assert refused.status_code == 429 and not refused.logged_in
    assert log_in("vic", PASSWORD, address="192.0.2.11").logged_in  # the pair only


def test_an_address_is_known_for_the_days_configured(vic: User, settings: Any) -> None:
    from axes.models import AccessLog

    assert log_in("vic", PASSWORD, address="192.0.2.10").logged_in
    AccessLog.objects.update(attempt_time=timezone.now() - dt.timedelta(
        days=settings.LOGIN_KNOWN_ADDRESS_DAYS + 1))
    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in("vic", "wrong", address=f"10.0.0.{i}")
    assert not log_in("vic", PASSWORD, address="192.0.2.10").logged_in  # too long ago


def test_the_way_back_for_a_locked_name_is_axes_reset_username(vic: User,
                                                               settings: Any) -> None:
    from django.core.management import call_command

    for i in range(settings.AXES_FAILURE_LIMIT):
        log_in("vic", "wrong", address=f"10.0.0.{i}")
    assert not log_in("vic", PASSWORD, address="10.0.9.9").logged_in
    call_command("axes_reset_username", "vic", stdout=io.StringIO())
    assert log_in("vic", PASSWORD, address="10.0.9.9").logged_in


def test_the_lockout_ends_after_its_time(vic: User, settings: Any) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in("vic", "wrong")
    assert not log_in("vic", PASSWORD).logged_in
    AccessAttempt.objects.update(attempt_time=timezone.now() - dt.timedelta(minutes=16))
    assert log_in("vic", PASSWORD).logged_in


def test_an_admin_unlocks_in_the_django_admin_and_it_is_audited(vic: User,
                                                                settings: Any) -> None:
    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in("vic", "wrong")
    assert not log_in("vic", PASSWORD).logged_in
    # An admin of the console (is_staff, the admin group's grants of migration 0007).
    ada = User.objects.create_user("ada", is_staff=True)
    ada.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="axes",
        codename__in=["view_accessattempt", "delete_accessattempt"]))
    admin = Client()
    admin.force_login(ada)
    listing = admin.get("/admin/axes/accessattempt/")
    assert listing.status_code == 200 and "vic" in listing.content.decode()
    pks = list(AccessAttempt.objects.values_list("pk", flat=True))
    done = admin.post("/admin/axes/accessattempt/", {"action": "unlock",
                                                     "_selected_action": pks}, follow=True)
    assert "Unlocked" in done.content.decode()
    assert log_in("vic", PASSWORD).logged_in
    entry = AuditEntry.objects.get(action="unlock")
    assert (entry.actor, entry.source, entry.acted) == ("ada", "admin", 1)
    assert "user name 'vic' from 127.0.0.1" in entry.target


def test_a_viewer_may_not_unlock(vic: User) -> None:
    viewer = Client()
    viewer.force_login(vic)
    assert viewer.get("/admin/axes/accessattempt/").status_code == 302  # not staff: log in


def test_programmatic_logins_are_not_throttled(vic: User, settings: Any) -> None:
    """A login without a request (the test client's login(), a script) has no address:
    django-axes is left out, and nothing is recorded for it."""
    for _ in range(settings.AXES_FAILURE_LIMIT + 1):
        assert not Client().login(username="vic", password="wrong")
    assert Client().login(username="vic", password=PASSWORD)
    assert not AccessAttempt.objects.exists() and not AuditEntry.objects.exists()


def test_behind_a_trusted_proxy_the_forwarded_address_counts(vic: User,
                                                             settings: Any) -> None:
    settings.TRUST_X_FORWARDED_FOR = True
    proxy = {"REMOTE_ADDR": "127.0.0.1"}
    for i in range(settings.AXES_FAILURE_LIMIT):
        Client(**proxy, HTTP_X_FORWARDED_FOR=f"1.2.3.4, 10.9.9.{i}").post(
            "/login/", {"username": f"guess{i}", "password": "wrong"})
    # Five callers behind one proxy: none of them is locked by the others' failures.
    ok = Client(**proxy, HTTP_X_FORWARDED_FOR="1.2.3.4, 10.9.9.200")
    ok.post("/login/", {"username": "vic", "password": PASSWORD})
    assert "_auth_user_id" in ok.session
    assert AuditEntry.objects.filter(actor="ip:10.9.9.0").exists()


@pytest.mark.parametrize("name", ["x" * 100_000, "a\x00b", "\U0010ffff" * 200, ""])
def test_a_junk_user_name_is_a_failed_login_not_an_error(vic: User, name: str) -> None:
    response = log_in(name, "wrong")
    assert response.status_code == 200 and not response.logged_in
    assert "do not match" in response.content.decode()

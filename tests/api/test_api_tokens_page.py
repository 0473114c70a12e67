"""The console's Tokens page: a user creates a token (shown on that answer only), sees and
revokes their own; an admin sees and revokes everyone's; the API refuses a revoked token at
its next call. The page's forms need the session and CSRF, as every console form."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from core.models import ApiToken, AuditEntry
from core.queue import Queue
from tests.console_support import logged_in_client

pytestmark = pytest.mark.django_db


def test_a_user_creates_a_token_shown_once_then_revokes_it(console: Queue) -> None:
    otto = logged_in_client("otto", "operator")
    r = otto.post("/tokens/create/", {"name": "etl", "scope": "operate", "expires": "7d"})
    assert r.status_code == 200 and r["Cache-Control"].startswith("max-age=0")
    text = re.search(r'id="token-text"[^>]*>(qa_[^<]+)<', r.content.decode())[1]
    assert ApiToken.objects.get(name="etl").user.username == "otto"
    page = otto.get("/tokens/").content.decode()
    assert "etl" in page and text not in page  # never shown again
    api = Client()
    auth = {"Authorization": f"Bearer {text}"}
    assert api.get("/api/v1/queues/default", headers=auth).status_code == 200
    r = otto.post("/tokens/etl/revoke/")
    assert r.status_code == 302
    assert api.get("/api/v1/queues/default", headers=auth).status_code == 401
    assert AuditEntry.objects.filter(action="token-revoke", actor="otto", acted=1).exists()
    assert "Token etl revoked" in otto.get("/tokens/").content.decode()  # its message, read
    # A second revoke (a stale tab) says nothing was done, not that it revoked the token.
    page = otto.post("/tokens/etl/revoke/", follow=True).content.decode()
    assert "Nothing done: token etl was revoked already." in page and "refused from now" not in page


def test_bad_input_is_a_400_page_with_the_message(console: Queue) -> None:
    otto = logged_in_client("otto", "operator")
    r = otto.post("/tokens/create/", {"name": "<b>x</b>", "scope": "root"})
    assert r.status_code == 400 and "is not valid" in r.content.decode()
    assert "<b>x</b>" not in r.content.decode()  # escaped
    assert not ApiToken.objects.exists()


def test_others_tokens_are_hidden_from_a_user_but_an_admin_revokes_them(console: Queue) -> None:
    otto = logged_in_client("otto", "operator")
    otto.post("/tokens/create/", {"name": "otto-etl", "scope": "read"})
    vera = logged_in_client("vera", "viewer")
    assert "otto-etl" not in vera.get("/tokens/").content.decode()
    assert vera.post("/tokens/otto-etl/revoke/").status_code == 403
    assert ApiToken.objects.get(name="otto-etl").revoked_at is None
    ada = logged_in_client("ada", "admin")
    assert "otto-etl" in ada.get("/tokens/").content.decode()
    assert ada.post("/tokens/otto-etl/revoke/").status_code == 302
    assert ApiToken.objects.get(name="otto-etl").revoked_at is not None


def test_the_forms_need_csrf_as_every_console_form(console: Queue, db: Any) -> None:
    from tests.ops_support import user

    c = Client(enforce_csrf_checks=True)
    c.force_login(user("olga", "operator"))
    assert c.post("/tokens/create/", {"name": "x", "scope": "read"}).status_code == 403
    assert not ApiToken.objects.exists()

"""Tokens: created once and stored hashed, refused when missing, wrong, expired or revoked
(at once), narrowed by their scope (403, audited under the token's name), rate-limited per
token; `manage.py token` creates, lists and revokes them."""

from __future__ import annotations

import datetime as dt
import io
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from core.models import ApiToken, AuditEntry
from core.ops import tokens
from core.queue import Queue
from tests.api_support import Caller
from tests.ops_support import user

pytestmark = pytest.mark.django_db


def test_the_command_prints_the_token_once_on_its_last_line_and_stores_only_its_digest(
    console: Queue,
) -> None:
    user("carl", "operator")
    out = io.StringIO()
    call_command("token", "create", "ci", "--user", "carl", "--scope", "operate",
                 "--expires", "30d", stdout=out)
    text = out.getvalue().splitlines()[-1]
    assert text.startswith("qa_")
    row = ApiToken.objects.get(name="ci")
    assert row.digest == tokens.digest(text) and text not in row.digest
    # The secret (token_urlsafe: it may hold "_" too) is nowhere in the table.
    assert not ApiToken.objects.filter(digest__contains=text.split("_", 2)[2]).exists()
    assert abs((row.expires_at - timezone.now()) - dt.timedelta(days=30)) < dt.timedelta(minutes=1)
    listing = io.StringIO()
    call_command("token", "list", stdout=listing)
    assert "ci" in listing.getvalue() and text not in listing.getvalue()
    assert "active" in listing.getvalue()
    c = Caller(text, "ci", Client())
    assert c.get("/queues/default").status_code == 200
    call_command("token", "revoke", "ci", stdout=io.StringIO())
    r = c.get("/queues/default")
    assert r.status_code == 401 and "revoked" in r.json()["message"]


def test_the_command_refuses_bad_input_with_a_message(db: Any) -> None:
    user("carl", "operator")
    for args, words in ((["create", "x y", "--user", "carl", "--scope", "read"], "not valid"),
                        (["create", "t", "--user", "nobody", "--scope", "read"], "no active"),
                        (["create", "t", "--user", "carl", "--scope", "read", "--expires",
                          "soon"], "not a duration"),
                        (["create", "t", "--user", "carl", "--scope", "read", "--expires",
                          "0d"], "at least a minute"),
                        (["revoke", "missing"], "no token")):
        with pytest.raises(CommandError, match=words):
            call_command("token", *args, stdout=io.StringIO())
    call_command("token", "create", "t", "--user", "carl", "--scope", "read",
                 stdout=io.StringIO())
    with pytest.raises(CommandError, match="exists already"):
        call_command("token", "create", "t", "--user", "carl", "--scope", "read",
                     stdout=io.StringIO())


def test_no_token_a_wrong_one_or_an_expired_one_is_a_401_with_a_message(
    console: Queue, api_operator: Caller
) -> None:
    token = api_operator.token or ""
    other_last = "B" if token.endswith("A") else "A"
    for header in (None, "Bearer nope", "Basic abc", f"Bearer {token}x",
                   f"Bearer {token[:-1]}{other_last}"):
        headers = {"Authorization": header} if header else {}
        r = api_operator.client.get("/api/v1/queues/default", headers=headers)
        assert r.status_code == 401, header
        assert r.json()["message"] and token not in r.json()["message"]
    ApiToken.objects.filter(name=api_operator.name).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1))
    r = api_operator.get("/queues/default")
    assert r.status_code == 401 and "expired" in r.json()["message"]


def test_a_read_token_reads_but_an_operate_call_is_403_and_audited_under_its_name(
    console: Queue, api_reader: Caller
) -> None:
    rid = console.submit([{"n": 1}], handler="echo").request_id
    assert api_reader.get(f"/queues/default/requests/{rid}").json()["state"] == "active"
    r = api_reader.post(f"/queues/default/requests/{rid}/cancel")
    assert r.status_code == 403
    assert "scope is read" in r.json()["message"] and "operate" in r.json()["message"]
    entry = AuditEntry.objects.get(action="cancel")
    assert entry.refused and entry.actor == f"token:{api_reader.name}" and entry.source == "api"
    assert console.state(rid) == "active"
    r = api_reader.post("/queues/default/requests", {"handler": "echo", "tasks": [1],
                                                     "any_handler": True})
    assert r.status_code == 403


def test_an_operate_token_acts_and_is_audited_under_its_name_but_not_as_an_admin(
    console: Queue, api_operator: Caller
) -> None:
    rid = console.submit([{"n": 1}], handler="echo").request_id
    r = api_operator.post(f"/queues/default/requests/{rid}/cancel")
    assert r.status_code == 200 and r.json()["acted"] == 1
    entry = AuditEntry.objects.get(action="cancel")
    assert not entry.refused and entry.actor == f"token:{api_operator.name}"
    assert entry.user.username == "otto"
    assert api_operator.post("/queues/default/pause").status_code == 403  # an admin's
    assert not console.paused()


def test_an_admin_token_of_an_operator_still_has_only_the_operators_permissions(
    console: Queue, db: Any
) -> None:
    from tests.api_support import token_for

    c = token_for("olga", "operator", "admin")
    r = c.post("/queues/default/pause")
    assert r.status_code == 403 and "core.pause_queue" in r.json()["message"]


def test_a_token_past_its_rate_is_refused_with_429_until_the_next_minute(
    console: Queue, api_reader: Caller, settings: Any
) -> None:
    settings.API_RATE_PER_MIN = 3
    codes = [api_reader.get("/queues/default").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    r = api_reader.get("/queues/default")
    assert 1 <= int(r["Retry-After"]) <= 60 and "calls this minute" in r.json()["message"]
    ApiToken.objects.filter(name=api_reader.name).update(window=0)  # the next minute
    assert api_reader.get("/queues/default").status_code == 200


def test_a_user_manages_their_own_tokens_and_an_admin_everyones(db: Any) -> None:
    from core.ops.errors import Refused

    otto, vera = user("otto", "operator"), user("vera", "viewer")
    ada = user("ada", "admin")
    tokens.create(otto, "otto-1", user=otto, scope="operate")
    with pytest.raises(Refused):
        tokens.create(vera, "vera-for-otto", user=otto, scope="admin")
    with pytest.raises(Refused):
        tokens.revoke(vera, "otto-1")
    assert [t.name for t in tokens.listing(vera)] == []
    assert [t.name for t in tokens.listing(ada)] == ["otto-1"]
    first = tokens.revoke(ada, "otto-1")
    assert first.done and first.token.revoked_at is not None
    again = tokens.revoke(ada, "otto-1")  # a second revoke (another tab): says nothing done
    assert not again.done and again.token.revoked_at == first.token.revoked_at
    assert AuditEntry.objects.filter(action="token-revoke", actor="ada", acted=1).exists()
    assert AuditEntry.objects.filter(action="token-revoke", actor="ada", skipped=1).exists()
    assert AuditEntry.objects.filter(action="token-create", refused=True).exists()

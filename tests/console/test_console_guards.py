"""The console's guards: bad parameters, Redis down, escaping, security headers and cookies."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from core.queue import Queue
from core.stack.redis_server import free_port
from tests.console_support import HOSTILE, Seeded, ensure_groups

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("url", "status", "says"),
    [
        ("/requests/?after=abc", 400, "Bad page cursor"),
        ("/requests/?after=123", 400, "Bad page cursor"),
        ("/requests/?after=999999999999999999999:1", 400, "Bad page cursor"),
        ("/requests/?priority=500", 400, "priority must be a whole number from 0 to 99"),
        ("/requests/?priority=abc", 400, "priority must be"),
        ("/requests/?state=nope", 400, "state must be one of"),
        ("/requests/?sort=sideways", 400, "sort must be one of"),
        ("/requests/?since=yesterday", 400, "since must be a date"),
        ("/requests/?until=2026-13-45", 400, "until must be a date"),
        ("/requests/?queue=nosuch", 404, "no queue named"),
        ("/requests/default/nosuch/", 404, "has no request"),
        ("/requests/default/bad%20id%7B/", 404, "invalid request id"),
        ("/requests/nosuch/run-1/", 404, "no queue named"),
        ("/requests/default/run-1/?after=junk", 400, "Bad page cursor"),
        ("/pending/?after=<junk>", 400, "Bad page cursor"),
        ("/pending/?after=1:x/y/z", 400, "Bad page cursor"),
        ("/workers/?after=junk", 400, "Bad page cursor"),
        ("/workers/?page=abc&after=1:%7B", 400, "Bad page cursor"),
        ("/dead/?since=not-a-date", 400, "since must be a date"),
        ("/dead/default/zz%3Cscript%3E/", 404, "not an error fingerprint"),
        ("/dead/default/" + "a" * 40 + "/", 404, "no dead letters with fingerprint"),
        ("/dead/default/" + "f" * 40 + "/?after=junk", 400, "Bad page cursor"),
        ("/?queue=%3Cscript%3E", 404, "no queue named"),
        ("/nowhere/", 404, "Not found"),
    ],
)
def test_bad_parameters_are_a_page_with_the_reason(
    viewer: Client, seeded: Seeded, url: str, status: int, says: str
) -> None:
    response = viewer.get(url)
    assert response.status_code == status, response.content[-600:]
    html = response.content.decode()
    assert says in html
    assert "Traceback" not in html
    assert "<script>" not in html


def test_page_is_ignored_not_an_error(viewer: Client, seeded: Seeded) -> None:
    # There is no ?page= (pages go by cursor): a stray one changes nothing.
    assert viewer.get("/requests/?page=abc").status_code == 200


def test_redis_down_gives_every_page_a_banner_and_503_then_recovers(
    viewer: Client, seeded: Seeded, settings: Any
) -> None:
    good = settings.REDIS_URL
    settings.REDIS_URL = f"redis://:secret@127.0.0.1:{free_port()}/0"
    for url in ("/", "/requests/", f"/requests/default/{seeded.running}/", "/pending/",
                "/dead/", f"/dead/default/{seeded.fingerprint}/", "/workers/"):
        response = viewer.get(url)
        assert response.status_code == 503, url
        html = response.content.decode()
        assert 'class="banner"' in html and "cannot be reached" in html, url
        assert "secret" not in html and "Traceback" not in html
        fragment = viewer.get(url, headers={"HX-Request": "true", "HX-Target": "live"})
        assert fragment.status_code == 503
        assert "<nav>" not in fragment.content.decode()
    settings.REDIS_URL = good
    assert viewer.get("/").status_code == 200


def test_everything_from_the_queue_is_escaped(viewer: Client, seeded: Seeded,
                                              console: Queue) -> None:
    # Hostile text everywhere Redis or the history can hold it: payloads, errors,
    # tracebacks, tenant and handler names (history rows), worker info.
    console.redis.hset(console.keys.request(seeded.running), "tenant", HOSTILE)
    urls = ["/", "/requests/", f"/requests/default/{seeded.running}/",
            f"/requests/default/{seeded.failed}/", f"/requests/default/{seeded.history}/",
            "/pending/", "/dead/", f"/dead/default/{seeded.fingerprint}/", "/workers/",
            f"/requests/?tenant={HOSTILE}", f"/dead/?handler={HOSTILE}"]
    shown = 0
    for url in urls:
        html = viewer.get(url).content.decode()
        assert "<script>alert" not in html, url
        assert '"onmouseover=' not in html, url
        shown += html.count("&lt;script&gt;alert(1)&lt;/script&gt;")
    assert shown > 10  # the hostile text is there, escaped


def test_security_headers_and_no_inline_script(viewer: Client, seeded: Seeded) -> None:
    response = viewer.get("/")
    csp = response["Content-Security-Policy"]
    assert "default-src 'self'" in csp and "script-src 'self'" in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert response["X-Content-Type-Options"] == "nosniff"
    html = response.content.decode()
    for script in re.findall(r"<script[^>]*>(.*?)</script>", html, re.S):
        assert script.strip() == ""  # every script is a file of ours
    assert " style=" not in html and "<style" not in html
    assert '"includeIndicatorStyles": false' in html
    assert 'hx-headers=\'{"X-CSRFToken": "' in html


def test_login_page_and_cookies(client: Client, db: Any, settings: Any) -> None:
    from django.contrib.auth.models import Group, User

    ensure_groups()
    u = User.objects.create_user("vic", password="a-long-password")
    u.groups.add(Group.objects.get(name="viewer"))
    page = client.get("/login/?next=/workers/")
    assert page.status_code == 200 and "Log in to the console" in page.content.decode()
    response = client.post("/login/", {"username": "vic", "password": "a-long-password",
                                       "next": "/workers/"})
    assert response.status_code == 302 and response["Location"] == "/workers/"
    cookie = response.cookies[settings.SESSION_COOKIE_NAME]
    assert cookie["httponly"] and cookie["samesite"] == "Lax" and not cookie["secure"]
    secure = Client().post("/login/", {"username": "vic", "password": "a-long-password"},
                           secure=True)
    assert secure.cookies[settings.SESSION_COOKIE_NAME]["secure"]
    bad = Client().post("/login/", {"username": "vic", "password": "wrong"})
    assert bad.status_code == 200 and "do not match" in bad.content.decode()


def test_logout_is_a_post(viewer: Client, seeded: Seeded) -> None:
    response = viewer.post("/logout/")
    assert response.status_code == 302
    assert viewer.get("/").status_code == 302

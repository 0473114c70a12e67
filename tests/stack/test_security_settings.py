"""What the console's responses and the stack's files promise: no page is cached, static files
cannot be framed either, and QA_VAR_DIR (database, secret key, admin password) is private to
its user, also when it was made before with wider modes."""

from __future__ import annotations

import io
import stat
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from core.queue import Queue
from core.stack.supervisor import Stack

pytestmark = pytest.mark.django_db


def test_every_console_response_says_no_store(viewer: Client, console: Queue) -> None:
    for path, status in [("/", 200), ("/requests/", 200), ("/audit/", 200),
                         ("/requests/?priority=500", 400), ("/requests/default/nope/", 404)]:
        r = viewer.get(path)
        assert r.status_code == status, path
        assert "no-store" in r["Cache-Control"], path
    partial = viewer.get("/requests/", HTTP_HX_REQUEST="true")
    assert "no-store" in partial["Cache-Control"]
    login = Client().get("/login/")
    assert "no-store" in login["Cache-Control"] and login["X-Frame-Options"] == "DENY"


def test_static_files_cannot_be_framed_and_stay_cacheable(settings: Any) -> None:
    settings.WHITENOISE_USE_FINDERS = True  # serve from the app's static/ (no collectstatic)
    settings.WHITENOISE_AUTOREFRESH = True
    r = Client().get("/static/core/console.css")
    assert r.status_code == 200
    assert r["X-Frame-Options"] == "DENY"
    assert "frame-ancestors 'none'" in r["Content-Security-Policy"]
    assert "no-store" not in r.get("Cache-Control", "")  # whitenoise's own caching


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_stack_makes_an_existing_var_dir_private(tmp_path: Path, settings: Any) -> None:
    var = tmp_path / "var"
    var.mkdir(mode=0o755)
    var.chmod(0o755)
    for name in ("db.sqlite3", "secret_key", "admin_password", "db.sqlite3-wal"):
        (var / name).write_text("x")
        (var / name).chmod(0o644)
    (var / "sample").mkdir()
    settings.VAR_DIR = var
    Stack(host="127.0.0.1", port=0, out=io.StringIO())._make_private()
    assert mode(var) == 0o700
    for name in ("db.sqlite3", "secret_key", "admin_password", "db.sqlite3-wal"):
        assert mode(var / name) == 0o600, name


def test_gunicorn_believes_no_forwarded_proto_unless_trusted(settings: Any) -> None:
    def gunicorn_argv() -> list[str]:
        [spec] = [s for s in Stack(host="127.0.0.1", port=8000, out=io.StringIO()).services()
                  if s.name == "gunicorn"]
        return spec.argv

    argv = gunicorn_argv()
    i = argv.index("--forwarded-allow-ips")
    assert argv[i + 1] == ""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    assert "--forwarded-allow-ips" not in gunicorn_argv()  # Django believes it then

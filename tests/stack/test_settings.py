"""Settings come from the environment: each case imports them in a fresh interpreter with a
controlled environment, as gunicorn or manage.py would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG_VARS = (
    "REDIS_URL", "DATABASE_URL", "QUEUE_PREFIX", "SECRET_KEY", "DEBUG", "ALLOWED_HOSTS",
    "HOST", "PORT", "QA_ADMIN_PASSWORD", "QA_VAR_DIR", "QA_REDIS_PORT",
)
PROBE = """
import json, os
os.environ["DJANGO_SETTINGS_MODULE"] = "queueadmin.settings"
from django.conf import settings
db = settings.DATABASES["default"]
print(json.dumps({
    "redis_url": settings.REDIS_URL, "embedded": settings.EMBEDDED_REDIS,
    "prefix": settings.QUEUE_PREFIX, "secret_key": str(settings.SECRET_KEY),
    "debug": settings.DEBUG,
    "hosts": settings.ALLOWED_HOSTS, "engine": db["ENGINE"], "name": str(db["NAME"]),
    "db_host": db.get("HOST"), "db_port": db.get("PORT"), "db_user": db.get("USER"),
    "static_root": str(settings.STATIC_ROOT), "web": [settings.WEB_HOST, settings.WEB_PORT],
}))
"""


def load(tmp_path: Path, **env: str) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items() if k not in CONFIG_VARS}
    base["QA_VAR_DIR"] = str(tmp_path / "var")
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env={**base, **env},
        capture_output=True, text=True, timeout=60, check=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_defaults_are_the_embedded_single_machine_stack(tmp_path: Path) -> None:
    s = load(tmp_path)

    assert s["redis_url"] == "redis://127.0.0.1:6390/0" and s["embedded"] is True
    assert s["prefix"] == "qa"
    assert s["debug"] is False
    assert s["hosts"] == ["localhost", "127.0.0.1"]
    assert s["engine"] == "queueadmin.sqlite"  # Django's, making QA_VAR_DIR when first opened
    assert s["name"] == str(tmp_path / "var" / "db.sqlite3")
    assert s["static_root"] == str(tmp_path / "var" / "static")
    assert s["web"] == ["127.0.0.1", 8000]


def test_a_generated_secret_key_is_kept_so_sessions_survive_restarts(tmp_path: Path) -> None:
    first = load(tmp_path)["secret_key"]
    second = load(tmp_path)["secret_key"]

    assert len(first) >= 50 and first == second
    key_file = tmp_path / "var" / "secret_key"
    assert key_file.read_text().strip() == first
    assert key_file.stat().st_mode & 0o077 == 0  # readable by its owner only
    assert load(tmp_path, SECRET_KEY="from-env")["secret_key"] == "from-env"


def test_postgres_database_url(tmp_path: Path) -> None:
    s = load(tmp_path, DATABASE_URL="postgres://qa:pw@db.internal:5433/queueadmin")

    assert s["engine"] == "django.db.backends.postgresql"
    assert (s["name"], s["db_host"], s["db_port"], s["db_user"]) == (
        "queueadmin", "db.internal", 5433, "qa"
    )


def test_environment_overrides(tmp_path: Path) -> None:
    s = load(
        tmp_path, REDIS_URL="redis://cache:6379/2", QUEUE_PREFIX="prod", DEBUG="true",
        ALLOWED_HOSTS="qa.example.com, .internal ,", HOST="0.0.0.0", PORT="9000",
    )

    assert s["redis_url"] == "redis://cache:6379/2" and s["embedded"] is False
    assert s["prefix"] == "prod"
    assert s["debug"] is True
    assert s["hosts"] == ["qa.example.com", ".internal"]
    assert s["web"] == ["0.0.0.0", 9000]
    assert load(tmp_path, QA_REDIS_PORT="6400")["redis_url"] == "redis://127.0.0.1:6400/0"


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("TRUE", True), ("0", False),
                                                  ("yes", False), ("", False)])
def test_debug_is_on_only_for_1_or_true(tmp_path: Path, value: str, expected: bool) -> None:
    assert load(tmp_path, DEBUG=value)["debug"] is expected


def test_var_dir_and_secret_key_are_private_also_when_made_before(tmp_path: Path) -> None:
    load(tmp_path)
    var = tmp_path / "var"
    assert var.stat().st_mode & 0o777 == 0o700  # made here: its user's only
    key = var / "secret_key"
    key.chmod(0o644)  # a key file from before it was kept private
    assert load(tmp_path)["secret_key"] == key.read_text().strip()
    assert key.stat().st_mode & 0o777 == 0o600


def test_a_checkout_keeps_its_own_var_and_assets_from_any_directory(tmp_path: Path) -> None:
    """Installed from a wheel, var/ is the current directory's (tests/stack/test_packaging.py); a
    checkout's settings keep using the checkout's var/, templates/ and static/ wherever
    manage.py is run from."""
    probe = ("import json, os; os.environ['DJANGO_SETTINGS_MODULE'] = 'queueadmin.settings'; "
             "from django.conf import settings as s; print(json.dumps([str(s.VAR_DIR), "
             "str(s.TEMPLATES[0]['DIRS'][0]), str(s.STATICFILES_DIRS[0]), s.CODE_PATH]))")
    env = {k: v for k, v in os.environ.items() if k not in CONFIG_VARS}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT), "SECRET_KEY": "not-kept"},
        capture_output=True, text=True, timeout=60, check=True,
    )
    assert json.loads(done.stdout) == [str(ROOT / "var"), str(ROOT / "templates"),
                                       str(ROOT / "static"), str(ROOT)]
    assert not (tmp_path / "var").exists()

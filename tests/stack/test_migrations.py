"""The models and their migrations agree: a model change without its migration fails here
(on SQLite, and on PostgreSQL in `make test`'s second pass)."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_lacks_a_migration() -> None:
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as exc:
        pytest.fail(f"makemigrations --check found changes without a migration:\n"
                    f"{out.getvalue()} (exit {exc.code})")

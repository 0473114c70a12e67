"""The service layer's and the commands' tests (core/ops, core/cli): actions, bulk, audit,
permissions, from every entry point.

Here: Users by role, for the service layer's functions, which take a User (the console's
logged-in Clients by role are in tests/conftest.py and tests/console/conftest.py). Helpers
that are not fixtures are in tests/ops_support.py."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from tests.ops_support import user


@pytest.fixture
def operator_user(db: Any) -> User:
    return user("otto", "operator")


@pytest.fixture
def viewer_user(db: Any) -> User:
    return user("vera", "viewer")


@pytest.fixture
def admin_role_user(db: Any) -> User:
    """In the admin group, as `createuser --role admin` makes one (pytest-django's own
    `admin_user` is a superuser, who has every permission without any group)."""
    return user("ada", "admin", staff=True)

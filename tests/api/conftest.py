"""The HTTP API's tests (core/api, core/ops/tokens, `manage.py token`): tokens and their
refusals, every endpoint over the console's queue, the curl walkthrough of docs/api.md
against a live stack, and a fuzz of the OpenAPI schema. Helpers that are not fixtures:
tests/api_support.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api_support import Caller, token_for


@pytest.fixture
def api_operator(db: Any) -> Caller:
    """A test client calling the API with an operate token of otto (operator group)."""
    return token_for("otto", "operator", "operate")


@pytest.fixture
def api_reader(db: Any) -> Caller:
    """A read token of rita, an operator: her permissions, narrowed to reading."""
    return token_for("rita", "operator", "read")


@pytest.fixture
def api_admin(db: Any) -> Caller:
    """An admin token of ada (admin group)."""
    return token_for("ada", "admin", "admin")

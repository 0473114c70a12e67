"""What the HTTP API's tests share besides their fixtures (tests/api/conftest.py): a user's
token and a Django test client that sends it on every call."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.test import Client

from core.ops import tokens
from tests.ops_support import CLI, user

API = "/api/v1"


@dataclass
class Caller:
    """Calls the API with `token` (None: with none)."""

    token: str | None
    name: str
    client: Client

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def get(self, path: str, **params: Any) -> Any:
        return self.client.get(API + path, params, headers=self._headers())

    def post(self, path: str, body: Any = None, *, raw: str | None = None) -> Any:
        data = raw if raw is not None else json.dumps({} if body is None else body)
        return self.client.post(API + path, data, content_type="application/json",
                                headers=self._headers())


    def put(self, path: str, body: Any = None) -> Any:
        return self.client.put(API + path, json.dumps({} if body is None else body),
                               content_type="application/json", headers=self._headers())

    def delete(self, path: str, **params: Any) -> Any:
        query = "?" + urlencode(params) if params else ""
        return self.client.delete(API + path + query, headers=self._headers())


def token_for(name: str, role: str | None, scope: str, *, expires: str | None = None) -> Caller:
    """A new user `name` in the group `role`, and a token of `scope` for it."""
    owner = user(name, role)
    made = tokens.create(CLI, f"{name}-{scope}", user=owner, scope=scope, expires=expires)
    return Caller(made.text, made.token.name, Client(enforce_csrf_checks=True))

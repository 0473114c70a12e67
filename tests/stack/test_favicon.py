"""/favicon.ico, which browsers ask for on pages that name no icon (the Django admin's, a JSON
answer), is the console's icon, served before any login and cached."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_favicon_is_served_to_anyone_and_cached(client: Client) -> None:
    response: Any = client.get("/favicon.ico")

    assert response.status_code == 200
    assert response["Content-Type"] == "image/x-icon"
    assert "max-age=86400" in response["Cache-Control"]
    body = b"".join(response.streaming_content)
    reserved, kind, count = struct.unpack("<HHH", body[:6])
    assert (reserved, kind) == (0, 1) and count >= 1  # an ICO file: its images follow
    assert client.head("/favicon.ico").status_code == 200


def test_the_favicon_takes_no_post(client: Client) -> None:
    assert client.post("/favicon.ico").status_code == 405


def test_a_logged_in_browser_gets_it_too(viewer: Client) -> None:
    assert viewer.get("/favicon.ico").status_code == 200

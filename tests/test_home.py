"""The placeholder home page: login required, then the default queue's stats."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from core.queue import Queue
from core.redis_server import free_port

pytestmark = pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning")


def test_anonymous_visitors_are_sent_to_log_in(client: Client, django_queue: Queue) -> None:
    response = client.get("/")

    assert response.status_code == 302
    assert response["Location"] == "/admin/login/?next=/"


def test_logged_in_the_page_shows_the_queue_stats(
    admin_client: Client, django_queue: Queue
) -> None:
    django_queue.submit(list(range(7)), priority=80, handler="echo")
    django_queue.submit([1, 2], handler="echo")
    django_queue.dequeue("w", 1)

    response = admin_client.get("/")

    assert response.status_code == 200
    stats = response.context["stats"]
    assert (stats.waiting, stats.leased, stats.waiting_by_priority) == (8, 1, {80: 6, 50: 2})
    html = response.content.decode()
    assert "<th>Waiting</th><td>8</td>" in html
    assert "priority 80</th><td>6</td>" in html
    assert "<th>Leased</th><td>1</td>" in html
    assert "<th>active</th><td>2</td>" in html


def test_unreachable_redis_is_a_503_page_not_a_crash(
    admin_client: Client, django_queue: Queue, settings: Any
) -> None:
    settings.REDIS_URL = f"redis://:pw@127.0.0.1:{free_port()}/0"

    response = admin_client.get("/")

    assert response.status_code == 503
    html = response.content.decode()
    assert "cannot be reached" in html and "make run" in html
    assert ":pw@" not in html

"""The mirror's lag, shown (issue 35, item 5): the Overview says how far the database's history
is behind the queue, and /metrics exports it as queueadmin_mirror_lag_seconds{queue}. Real
redis-server, database and mirror."""

from __future__ import annotations

import html as htmllib
import re
import time
from typing import Any

import pytest
from django.test import Client

from core.queue import Queue
from tests.mirror_support import mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]
TOKEN = "lag-token"


def shown_lag(client: Client) -> str:
    page = htmllib.unescape(client.get("/").content.decode())
    row = page[page.index('id="mirror-lag"'):]
    return re.sub(r"<[^>]+>", " ", row[:row.index("</tr>")]).split("History behind by", 1)[1]


def exported_lag(client: Client, queue: str) -> float | None:
    body = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    m = re.search(rf'^queueadmin_mirror_lag_seconds\{{queue="{queue}"\}} (\S+)$', body, re.M)
    return None if m is None else float(m.group(1))


def test_the_overview_and_metrics_show_how_far_the_history_is_behind(
        viewer: Client, console: Queue, settings: Any) -> None:
    settings.METRICS_TOKEN = TOKEN
    q = console
    q.submit([{"n": 1}], handler="resize", request_id="first")

    # No mirror has read the queue yet: said so, and no series.
    assert "no mirror has read this queue" in shown_lag(viewer)
    assert exported_lag(viewer, q.name) is None

    mirror(q)
    assert shown_lag(viewer).split() == ["0.0", "s"]
    assert exported_lag(viewer, q.name) == 0.0

    # Events the mirror has not written yet: the lag is the age of the oldest of them.
    q.submit([{"n": 2}], handler="resize", request_id="second")
    time.sleep(1.3)
    behind = exported_lag(viewer, q.name)
    assert behind is not None and 1.2 <= behind < 30, behind
    assert float(shown_lag(viewer).split()[0]) >= 1.2

    mirror(q)
    assert exported_lag(viewer, q.name) == 0.0

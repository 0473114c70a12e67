"""Work no live worker can run is named where it is listed (issue 33, items 2 and 3): tasks
whose handler no live worker runs wait (no worker leases them), and the overview, the strip
over every page and the request's page say so; a lease past its expiry is shown as not
running, on its way back to waiting."""

from __future__ import annotations

import pytest
from django.test import Client

from core.queue import Queue, handlers

pytestmark = pytest.mark.django_db


def test_waiting_work_for_a_handler_no_live_worker_runs_is_named(
    viewer: Client, console: Queue
) -> None:
    handlers.announce(console, "w1", ["echo"])
    console.heartbeat("w1", {}, lease_ms=10_000)  # a live worker, which does not run resize
    console.submit([1, 2, 3], request_id="resize-1", handler="resize")
    console.submit([1], request_id="echo-1", handler="echo")

    overview = viewer.get("/").content.decode()
    assert "3 tasks wait for handler &#x27;resize&#x27;, which no live worker runs" in overview
    assert 'id="strip-no-worker"' in overview and "<b>3</b> with no worker" in overview

    page = viewer.get("/requests/default/resize-1/").content.decode()
    assert 'id="no-worker-note"' in page
    assert "Its 3 waiting tasks wait for a worker that runs handler" in page
    assert 'id="no-worker-note"' not in viewer.get("/requests/default/echo-1/").content.decode()

    handlers.announce(console, "w2", ["resize"])  # a worker that runs it came
    assert 'id="strip-no-worker"' not in viewer.get("/").content.decode()
    assert 'id="no-worker-note"' not in viewer.get(
        "/requests/default/resize-1/").content.decode()


def test_a_lease_past_its_expiry_is_not_shown_as_running(viewer: Client, console: Queue) -> None:
    console.submit([1], request_id="r", handler="echo", lease_ms=1000)
    (lease,) = console.dequeue("gone", 1)
    page = viewer.get("/requests/default/r/").content.decode()
    assert "not recovered yet" not in page
    console.redis.zadd(console.keys.leases, {lease.lease: 1})  # its holder stopped long ago
    page = viewer.get("/requests/default/r/").content.decode()
    assert "not recovered yet" in page and 'class="bad expired-lease"' in page

"""What running tasks report (ctx.progress, ctx.log) on the request page, live, and on the
workers page beside each worker's current task."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils.html import escape

from core.queue import Queue
from tests.console_support import HOSTILE

pytestmark = pytest.mark.django_db
POLL = {"HX-Request": "true", "HX-Target": "live"}


def row_of(page: str, tid: str) -> str:
    found = re.search(rf'<tr id="progress-{re.escape(tid)}".*?</tr>', page, re.S)
    assert found, f"no progress row for task {tid}"
    return found.group(0)


def test_the_request_page_shows_each_running_tasks_progress_message_and_log(
    viewer: Client, console: Queue
) -> None:
    console.submit([1, 2, 3], request_id="big", handler="convert", concurrency=3)
    a, b, _ = console.dequeue("w-9", 3)
    assert console.progress(a, done=30, total=40, message=HOSTILE, worker="w-9",
                            lines=[(1000, "opened part 1"), (0, f"row {HOSTILE}")])
    assert console.progress(b, done=1204.5, worker="w-9")  # no total: a count, no bar
    page = viewer.get("/requests/default/big/").content.decode()
    ra = row_of(page, a.task_id)
    assert "data-running" in ra and "running" in ra
    assert "30 / 40 (75%)" in ra and 'width="75.000"' in ra
    assert "<script>" not in ra and escape(HOSTILE) in ra
    assert "opened part 1" in ra and ra.index("opened part 1") < ra.index("row ")
    rb = row_of(page, b.task_id)
    assert "1,204.5" in rb and "<svg" not in rb
    # The polled fragment carries it, so the page follows the task live.
    console.progress(a, done=40, total=40, message="writing", worker="w-9")
    fragment = viewer.get("/requests/default/big/", headers=POLL).content.decode()
    assert "40 / 40 (100%)" in row_of(fragment, a.task_id)
    console.ack(a)
    page = viewer.get("/requests/default/big/").content.decode()
    assert "data-running" not in row_of(page, a.task_id)  # finished: kept, not running
    assert page.index(f'id="progress-{b.task_id}"') < page.index(f'id="progress-{a.task_id}"')


def test_a_request_whose_tasks_report_nothing_has_no_progress_table(
    viewer: Client, console: Queue
) -> None:
    console.submit([1], request_id="quiet", handler="convert")
    console.dequeue("w-9", 1)
    page = viewer.get("/requests/default/quiet/").content.decode()
    assert 'id="task-progress"' not in page


def test_the_workers_page_shows_the_progress_of_each_current_task(
    viewer: Client, console: Queue
) -> None:
    console.submit([1, 2], request_id="big", handler="convert", concurrency=2)
    a, b = console.dequeue("w-9", 2)
    console.progress(a, done=3, total=12, message="chunk 3", worker="w-9")
    tasks = [{"queue": "default", "request": "big", "task": x.task_id, "since": 1} for x in (a, b)]
    console.heartbeat("w-9", {"dead_after_ms": 10_000, "tasks": tasks}, [a, b])
    response = viewer.get("/workers/")
    [w] = response.context["workers"]
    assert [t.progress.done if t.progress else None for t in w.tasks] == [3, None]
    page = response.content.decode()
    shown = re.search(rf'data-progress-of="{a.task_id}">(.*?)</div>', page, re.S)
    assert shown and "3 / 12 (25%)" in shown.group(1) and "chunk 3" in shown.group(1)
    assert f'data-progress-of="{b.task_id}"' not in page

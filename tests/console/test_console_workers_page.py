"""The workers page (issue 33, item 11): a worker an operator stopped stays listed as stopped,
by whom and when, after its process has exited (a real `runworker`), until a worker of that
name starts again or its stack restarts."""

from __future__ import annotations

import io
import re
import socket
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from core.ops import workers as ops_workers
from core.queue import Queue, read
from core.queue.prune import forget_stopped
from core.stack.supervisor import Stack

pytestmark = pytest.mark.django_db


def row_of(html: str, name: str) -> str:
    m = re.search(rf'<tr id="worker-{re.escape(name)}".*?</tr>', html, re.S)
    assert m, f"worker {name} is not listed"
    return m.group(0)


def test_a_stopped_worker_stays_listed_as_stopped_by_whom_and_when(
    admin: Client, console: Queue, spawn_worker: Any, wait_until: Any
) -> None:
    proc = spawn_worker("w-stop")
    q = Queue(console.redis, "q", prefix=console.keys.prefix)
    wait_until(lambda: (w := read.worker(q, "w-stop")) and w.info, 30,
               "the worker to register")
    assert "alive" in row_of(admin.get("/workers/?queue=q").content.decode(), "w-stop")
    ada = get_user_model().objects.get(username="ada")
    ops_workers.control(ada, "stop", "w-stop", queue="q")
    assert proc.wait(30) == 0  # it stopped at its next heartbeat and exited

    html = admin.get("/workers/?queue=q").content.decode()
    row = row_of(html, "w-stop")
    assert "data-stopped" in row and '<span class="wstate w-stopped">stopped</span>' in row
    assert re.search(r'by ada <time datetime="[^"]+" title="[^"]+">(just now|\d+ s ago)</time>',
                     row)
    assert "Quiet" not in row and "Stop<" not in row  # nothing to act on: it has exited
    assert "0 alive, 0 stale, 0 gone, 1 stopped on this page" in html

    # A worker of that name starting again is that worker, alive again.
    proc = spawn_worker("w-stop")
    wait_until(lambda: (w := read.worker(q, "w-stop")) and w.info, 30,
               "the worker to register again")
    row = row_of(admin.get("/workers/?queue=q").content.decode(), "w-stop")
    assert "data-stopped" not in row and "alive" in row
    proc.terminate()
    proc.wait(30)


def test_a_restarted_stack_forgets_the_workers_stopped_in_its_earlier_life(
    console: Queue, admin: Client
) -> None:
    host = socket.gethostname()
    earlier = [f"{host}-41-worker-1.1", f"{host}-41-worker-2.3"]  # named by runstack's _spawn
    mine = f"{host}-977-a1b2"  # a runworker's own name: not the stack's
    for name in [*earlier, mine]:
        console.heartbeat(name, {"host": host})
        console.control_worker(name, "stop", by="ada")
        console.unregister(name, stopped=True)
    assert {w.name for w in read.stopped_workers(console)} == {*earlier, mine}
    Stack(host="127.0.0.1", port=8000, out=io.StringIO())._forget_stopped_workers()
    assert [w.name for w in read.stopped_workers(console)] == [mine]
    html = admin.get("/workers/").content.decode()
    assert mine in html and f"{host}-41-worker" not in html
    assert forget_stopped(console, lambda name: name == mine) == 1

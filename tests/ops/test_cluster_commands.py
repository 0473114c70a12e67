"""The commands and the console on the suite's 3-shard Redis Cluster, with REDIS_URL naming a
node that holds none of the queues' keys: `default` and a second queue on another shard."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.test import Client
from redis.cluster import RedisCluster as ClusterClient

from core.conf import get_queue
from core.queue import read
from core.stack.redis_server import free_port
from tests.conftest import ClusterLayout

pytestmark = pytest.mark.filterwarnings("ignore:no worker of queue")


@pytest.fixture
def on_cluster(settings: Any, cluster_layout: ClusterLayout, prefix: str) -> ClusterLayout:
    """REDIS_URL: the node owning none of the layout's queues; this test's own key prefix."""
    settings.REDIS_URL = cluster_layout.url
    settings.QUEUE_PREFIX = prefix
    return cluster_layout


def manage(*args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def stat(*queues: str) -> dict[str, dict[str, Any]]:
    out, _ = manage("queuestat", "--json", *[a for q in queues for a in ("-q", q)])
    return {s["queue"]: s for s in json.loads(out)["queues"]}


def test_one_worker_process_runs_tasks_of_two_queues_on_two_shards_for_submit_wait(
    on_cluster: ClusterLayout, spawn_worker: Any, wait_until: Any, prefix: str, tmp_path: Path
) -> None:
    default, other = on_cluster.queues
    worker = spawn_worker("cw", "-q", default, "-q", other, url=on_cluster.url)
    wait_until(lambda: all(s["workers"] for s in stat(default, other).values()), 15,
               "the worker to register in both queues")

    for queue in (default, other):
        task = json.dumps({"k": f"{prefix}:{queue}", "seconds": 0})
        out, _ = manage("submit", task, task, "-q", queue, "--handler", "tracked",
                        "--request-id", f"r-{queue}", "--wait", "--timeout", "20")
        assert out.splitlines()[0] == f"r-{queue}"  # --wait returned: the request ended done

    ran = {q: get_queue(q).redis.lrange(f"{prefix}:{q}:log", 0, -1) for q in (default, other)}
    assert all(len(lines) == 4 and all(ln.endswith(" cw") for ln in lines)
               for lines in ran.values()), ran
    stats = stat(default, other)
    assert [stats[q]["totals"]["done"] for q in (default, other)] == [2, 2]
    assert worker.poll() is None
    log = (tmp_path / "cw.log").read_text()
    assert "Traceback" not in log and "MOVED" not in log, log


def test_sigterm_stops_a_worker_of_two_shards_cleanly(
    on_cluster: ClusterLayout, spawn_worker: Any, wait_until: Any, tmp_path: Path
) -> None:
    default, other = on_cluster.queues
    worker = spawn_worker("cw", "-q", default, "-q", other, url=on_cluster.url)
    wait_until(lambda: all(s["workers"] for s in stat(default, other).values()), 15,
               "the worker to register in both queues")

    worker.send_signal(signal.SIGTERM)

    assert worker.wait(10) == 0, (tmp_path / "cw.log").read_text()
    assert [s["workers"] for s in stat(default, other).values()] == [0, 0]  # unregistered


def test_submit_and_queuestat_with_and_without_queues(on_cluster: ClusterLayout) -> None:
    default, other = on_cluster.queues
    out, _ = manage("submit", "1", "2", "3", "--any-handler", "--handler", "h", "-p", "70")
    request_id = out.strip()
    manage("submit", "4", "-q", other, "--any-handler", "--handler", "h")

    table, _ = manage("queuestat")  # no -q: every queue of the registry, on any shard
    waiting = next(line for line in table.splitlines() if "│ waiting " in line)
    assert [c.strip() for c in waiting.split("│")[2:-1]] == ["3", "1"], table
    assert "default" in table and other in table
    stats = stat(default, other)
    assert [stats[q]["waiting"] for q in (default, other)] == [3, 1]
    assert stats[default]["waiting_by_priority"] == {"70": 3}
    info = read.request(get_queue(), request_id)
    assert info is not None and info.total == 3


def test_the_console_home_page_shows_the_default_queue(
    on_cluster: ClusterLayout, admin_client: Client
) -> None:
    queue = get_queue()
    assert isinstance(queue.redis, ClusterClient)
    queue.submit(list(range(5)), priority=80, handler="echo")
    queue.dequeue("w", 1)

    response = admin_client.get("/")

    assert response.status_code == 200
    current = response.context["current"]
    assert (current.stats.waiting, current.stats.leased) == (4, 1)
    assert response.context["health"].nodes == 3  # the cluster's primaries


def test_one_client_per_url_shared_by_every_queue(on_cluster: ClusterLayout) -> None:
    default, other = on_cluster.queues
    assert get_queue(default).redis is get_queue(other).redis


def _shell(*args: str, url: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "QUEUE_PREFIX")}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=django_settings.BASE_DIR,
        env={**env, "REDIS_URL": url}, capture_output=True, text=True, timeout=60,
    )
    return done, time.monotonic() - started


@pytest.mark.parametrize("command", ["queuestat", "runworker"])
def test_from_a_shell_a_bad_cluster_url_is_one_message_not_a_traceback(
    command: str, cluster_layout: ClusterLayout
) -> None:
    done, _ = _shell(command, url=cluster_layout.url.replace("/0", "/1"))

    assert done.returncode == 2  # a setting that is not valid: bad input
    assert "a Redis Cluster has only 0" in done.stderr and "REDIS_URL" in done.stderr
    assert "Traceback" not in done.stderr


def test_from_a_shell_seed_nodes_all_down_end_the_worker_at_once(tmp_path: Path) -> None:
    url = f"redis://:pw@127.0.0.1:{free_port()},127.0.0.1:{free_port()}/0"

    done, took = _shell("runworker", "--heartbeat", "thread", url=url)

    assert done.returncode == 1
    assert "Redis is unreachable" in done.stderr or "cannot reach" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr and ":pw@" not in done.stderr
    assert took < 10

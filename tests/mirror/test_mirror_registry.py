"""The queue registry (issue 7): producers and workers keep `<prefix>:queues` current, so the
console, `queuestat` with no -q and the mirror find every queue without KEYS or SCAN."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import redis

from core.cli.queuestat import queuestat
from core.queue import Queue, read, registry
from core.worker.heartbeat import Heartbeat
from core.worker.held import Held
from core.worker.outage import Outage

pytestmark = pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning")


class Counting(redis.Redis):
    """A client that counts the ZADDs it sends."""

    zadds = 0

    def zadd(self, *args: Any, **kwargs: Any) -> Any:
        Counting.zadds += 1
        return super().zadd(*args, **kwargs)


def test_producers_register_their_queues_once_per_process(
    redis_server: Any, prefix: str
) -> None:
    client = Counting.from_url(redis_server.url, decode_responses=True)
    Counting.zadds = 0
    a, b = Queue(client, "alpha", prefix=prefix), Queue(client, "beta", prefix=prefix)
    for i in range(5):
        a.submit([i], handler="h")
    b.open(handler="h")

    assert read.queues(client, prefix=prefix) == ["alpha", "beta"]
    assert Counting.zadds == 2  # the first submit of each queue, no more
    assert read.queues(client, prefix="other" + prefix) == []


def test_workers_refresh_their_queues_on_each_heartbeat(
    redis_client: redis.Redis, prefix: str
) -> None:
    queues = [Queue(redis_client, name, prefix=prefix) for name in ("q1", "q2")]
    hb = Heartbeat(worker="w", queues=queues, held=Held(), lease_ms=2000, interval=0.4,
                   reap_interval=10.0, info=dict, outage=Outage(), process=False)
    redis_client.zadd(queues[0].keys.registry, {"q1": 1})
    hb.start()
    try:
        seen: dict[str, int] = {}
        for _ in range(200):
            seen = registry.last_seen(redis_client, prefix=prefix)
            if seen.get("q1", 0) > 1 and "q2" in seen:
                break
            hb._stop_event.wait(0.02)
    finally:
        hb.stop()
        hb.join(5)
    assert sorted(seen) == ["q1", "q2"]
    assert seen["q1"] > 1  # refreshed


def test_forget_removes_a_name(redis_client: redis.Redis, prefix: str) -> None:
    q = Queue(redis_client, "gone", prefix=prefix)
    registry.touch([q])
    assert registry.forget(redis_client, "gone", prefix=prefix)
    assert read.queues(redis_client, prefix=prefix) == []
    q.submit([1], handler="h")  # forgotten here too: the next submit registers it again
    assert read.queues(redis_client, prefix=prefix) == ["gone"]


def test_queuestat_with_no_queue_shows_every_registered_queue(django_queue: Queue) -> None:
    for name in ("zeta", "alpha", "default"):
        Queue(django_queue.redis, name, prefix=django_queue.keys.prefix).submit(
            [1, 2], handler="h")
    out = io.StringIO()

    stats = queuestat(as_json=True, stdout=out)

    assert [s.queue for s in stats] == ["alpha", "default", "zeta"]
    assert [q["waiting"] for q in json.loads(out.getvalue())["queues"]] == [2, 2, 2]


def test_queuestat_with_an_empty_registry_shows_the_default_queue(django_queue: Queue) -> None:
    stats = queuestat(stdout=io.StringIO())
    assert [s.queue for s in stats] == ["default"]

"""The console's page reads (read.request_view, workers_view, leased_view,
running_progress, stopped_workers) on a Redis Cluster: their MULTI/EXEC runs on the queue's
shard, and the replies a cluster client's transaction leaves unparsed (XPENDING, XRANGE,
HSCAN) read as the single node's do."""

from __future__ import annotations

from typing import Any

import pytest
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as ClusterClient

from core.queue import Queue, read

pytestmark = pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning")


def test_the_page_reads_work_on_a_cluster(redis_cluster: Any, prefix: str) -> None:
    nodes = [ClusterNode(h, p) for h, p in redis_cluster.startup_nodes]
    client = ClusterClient(startup_nodes=nodes, decode_responses=True)
    try:
        q = Queue(client, "q7", prefix=prefix)
        rid = q.submit([{"n": i} for i in range(3)], request_id="r1", handler="h",
                       max_attempts=1).request_id
        a, b = q.dequeue("w1", 2)
        q.progress(a, done=1, total=4, worker="w1")
        q.fail(b, "ValueError: x", worker="w1")
        q.heartbeat("w1", {"host": "h"})

        v = read.request_view(q, rid)
        assert v.info is not None and (v.info.leased, v.info.dead) == (1, 1)
        assert v.stats.dead == 1 and v.stats.leased == 1
        assert [(d.task_id, d.error) for d in v.dead_letters] == [(b.task_id, "ValueError: x")]
        assert [(p.task_id, p.running) for p in v.progress] == [(a.task_id, True)]
        assert {p.task_id: p.consumer for p in v.pending} == {a.task_id: "w1",
                                                              b.task_id: "~dead"}
        assert v.payloads[a.task_id] == '{"n":0}' and len(v.first) == 3
        assert [f["type"] for _, f in v.events] == ["submitted", "dead"]

        assert [w.name for w in read.workers_view(q).workers.items] == ["w1"]
        assert [e.task_id for e in read.leased_view(q).page.entries] == [a.task_id]
        assert [p.task_id for p in read.running_progress(q, [rid])[rid]] == [a.task_id]
        q.control_worker("w1", "stop", by="ada")
        q.unregister("w1", stopped=True)
        [stopped] = read.workers_view(q).stopped
        assert (stopped.name, stopped.by, stopped.info) == ("w1", "ada", {"host": "h"})
    finally:
        client.close()

"""The engine on a real 3-shard Redis Cluster: every script's keys hash to one slot per queue,
so queues spread over shards and no script hits CROSSSLOT."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as ClusterClient

from core.queue import FollowUp, Queue, read
from core.stack.redis_server import RedisCluster
from tests.conftest import FakeClock


@pytest.fixture
def cluster_client(redis_cluster: RedisCluster) -> Iterator[ClusterClient]:
    """A client of the suite's cluster (tests/conftest.py); each test's queues carry a prefix
    of their own."""
    nodes = [ClusterNode(host, port) for host, port in redis_cluster.startup_nodes]
    c = ClusterClient(startup_nodes=nodes, decode_responses=True)
    yield c
    c.close()


def test_every_operation_runs_on_a_cluster_and_queues_spread_over_shards(
    cluster_client: ClusterClient,
) -> None:
    clock = FakeClock()
    prefix = "c" + uuid.uuid4().hex[:8]
    queues = [Queue(cluster_client, f"q{i}", prefix=prefix, clock=clock) for i in range(8)]
    slots = {cluster_client.keyslot(q.keys.ready) for q in queues}
    shards = {cluster_client.nodes_manager.get_node_from_slot(s).name for s in slots}
    assert len(shards) >= 2, "eight queue names should land on more than one shard"

    for q in queues:
        q.submit(
            [1, 2, 3], request_id="r", priority=60, concurrency=2, max_attempts=1, lease_ms=1000,
            handler="echo",
        )
        q.open(request_id="s", priority=40, handler="echo")
        q.add("s", [4])
        q.seal("s")
        a, b = q.dequeue("w", 2)
        q.ack(a)
        q.fail(b, "boom")
        c = q.dequeue("w", 1)[0]
        assert q.heartbeat("w", {"pid": 1}, [c]) == [1]
        assert q.progress(c, done=1, total=2, message="half", lines=[(0, "hi")])
        assert read.progress(q, "r")[0].message == "half"
        clock.advance(1001)
        assert [r.outcome for r in q.reap()] == ["dead"]
        assert q.requeue_request("r") == 2
        leases = q.dequeue("w2", 4)
        assert q.claim(leases[0].request_id, leases[0].task_id, "w3") == "w2"
        assert q.release(leases[:1]) == [-1]  # w2's run stopped: the task goes to w3
        [moved] = q.leave_idle("w3")
        assert q.release_task(moved.request_id, moved.task_id) == "w3"
        assert q.release([moved]) == [-1]  # w3 never ran it: back to waiting
        [entry] = [e for e in read.pending(q, "r") if e.task_id == moved.task_id]
        assert (entry.consumer, entry.moves_by_ms) == ("~waiting", None)
        q.cancel("s")
        assert [lease.request_id for lease in leases] == ["r", "r", "s"]
        assert q.ack_many(leases[1:]) == [True, True]
        rest = q.dequeue("w", 10)
        q.ack_many(rest)
        assert q.wait("r", timeout=1) == "done"
        assert q.wait("s", timeout=1) == "cancelled"
        stats = read.stats(q)
        assert (stats.waiting, stats.leased, stats.dead) == (0, 0, 0)
        assert read.workers(q).items[0].name == "w"
        assert read.dead_letters(q) == []


def test_results_are_kept_and_read_on_a_cluster(cluster_client: ClusterClient) -> None:
    """Issue 20: a result is written by the ack's script into a key of the queue's own slot,
    and read back (a transaction, a pipeline, HSCAN pages) from that slot alone."""
    prefix = "c" + uuid.uuid4().hex[:8]
    for name in ("qa", "qb", "qc"):
        q = Queue(cluster_client, name, prefix=prefix)
        q.submit([1, 2, 3], request_id="r", handler="echo")
        leases = q.dequeue("w", 3)
        q.ack_many(leases, [{"n": 1}, None, "three"])
        assert cluster_client.keyslot(q.keys.results("r")) == cluster_client.keyslot(q.keys.ready)
        assert q.wait("r", timeout=1, results=True) == (
            "done", {leases[0].task_id: {"n": 1}, leases[2].task_id: "three"})
        page = read.results(q, "r")
        assert page.total == 2 and page.cursor == 0
        assert read.result_text(q, "r", leases[2].task_id) == '"three"'


def test_a_flow_is_made_and_run_on_a_cluster(cluster_client: ClusterClient) -> None:
    """The flow's keys (request, follow-up, record and its index) share the queue's slot."""
    prefix = "c" + uuid.uuid4().hex[:8]
    for name in ("qa", "qb", "qc"):
        q = Queue(cluster_client, name, prefix=prefix)
        flow = q.submit_flow([1, 2], handler="echo", request_id="j", seal=False,
                             then=FollowUp([3], handler="echo", request_id="j.combine"),
                             record=q.records("job").new("j", {"spec": "s"}, keep_s=60,
                                                         at_ms=1))
        assert flow.created and flow.then[0] is not None and flow.then[0].state == "held"
        assert q.records("job").all("j") == {"spec": "s"}
        assert q.records("job").indexed(0, -1) == ["j"]
        q.ack_many(q.dequeue("w", 10))
        assert q.seal("j") == "done"
        q.ack_many(q.dequeue("w", 10))
        assert q.wait("j.combine", timeout=1) == "done"

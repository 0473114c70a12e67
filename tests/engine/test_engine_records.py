"""An application's records beside a queue's requests (core.queue.records): made once, in one
transaction with their expiry and their index entry, on one Redis and on a Redis Cluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as ClusterClient

from core.queue import InvalidInput, Queue
from core.stack.redis_server import RedisCluster


def check_records(q: Queue) -> None:
    rec = q.records("datajob")
    assert rec.create("j1", {"spec": "{}", "queue": q.name}, keep_s=600, at_ms=1000) is True
    # Made again (a retried submit): nothing changes but its life.
    assert rec.create("j1", {"spec": "other", "queue": "x"}, keep_s=900, at_ms=2000) is False
    assert rec.all("j1") == {"spec": "{}", "queue": q.name}
    assert 600 < q.redis.ttl(q.keys.record("datajob", "j1")) <= 900
    assert rec.create("j2", {"spec": "{}"}, keep_s=600, at_ms=1500) is True
    assert rec.indexed(0, -1) == ["j1", "j2"]  # by the time each was first made
    rec.put("j1", {"chunk:0": '{"rows": 1}'})
    assert rec.get_many("j1", ["chunk:0", "nope"]) == {"chunk:0": '{"rows": 1}', "nope": None}
    rec.unindex_before(1200)
    assert rec.indexed(0, -1) == ["j2"]
    rec.delete("j1")
    assert not rec.exists("j1") and rec.all("j1") == {}
    with pytest.raises(InvalidInput):
        rec.get("{bad}", "spec")


def test_a_record_is_made_once_with_its_life_and_its_index_entry(queue: Queue) -> None:
    check_records(queue)


@pytest.fixture
def cluster_client(redis_cluster: RedisCluster) -> Iterator[ClusterClient]:
    nodes = [ClusterNode(host, port) for host, port in redis_cluster.startup_nodes]
    c = ClusterClient(startup_nodes=nodes, decode_responses=True)
    yield c
    c.close()


def test_records_on_a_cluster_stay_in_their_queues_slot(
    cluster_client: ClusterClient, prefix: str
) -> None:
    check_records(Queue(cluster_client, "records", prefix=prefix))


def test_a_record_kind_is_an_id(redis_client: redis.Redis, prefix: str) -> None:
    with pytest.raises(InvalidInput):
        Queue(redis_client, "q", prefix=prefix).records("bad kind")

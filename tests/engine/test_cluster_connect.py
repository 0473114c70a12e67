"""core.queue.connect: one REDIS_URL for a single server or a Redis Cluster, named by any of
its nodes or by a list of seed nodes; bad URLs and dead nodes are clear errors, never a hang."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster as ClusterClient

from core.queue import InvalidInput, Queue, RedisUnavailable, read
from core.queue.connect import connect, redacted, seeds
from core.stack.redis_server import RedisServer, free_port
from tests.conftest import ClusterLayout

pytestmark = pytest.mark.filterwarnings("ignore:no worker of queue")


def test_a_node_that_owns_none_of_the_queues_gives_a_client_for_every_shard(
    cluster_layout: ClusterLayout, prefix: str
) -> None:
    client = connect(cluster_layout.url)
    try:
        assert isinstance(client, ClusterClient)
        queues = [Queue(client, name, prefix=prefix) for name in cluster_layout.queues]
        for q in queues:
            q.submit([1, 2], request_id="r", handler="echo")
        (lease,) = queues[1].dequeue("w", 1)
        queues[1].ack(lease)
        assert [read.stats(q).waiting for q in queues] == [2, 1]
    finally:
        client.close()
    # Through the node owning the queue instead, the same keys are seen.
    with redis.Redis.from_url(cluster_layout.owners["default"], decode_responses=True) as owner:
        assert owner.hget(queues[0].keys.request("r"), "total") == "2"


def test_seed_nodes_that_are_down_are_skipped(
    cluster_layout: ClusterLayout, prefix: str
) -> None:
    live = cluster_layout.url.removeprefix("redis://").removesuffix("/0")
    client = connect(f"redis://127.0.0.1:{free_port()},127.0.0.1:{free_port()},{live}/0")
    try:
        assert isinstance(client, ClusterClient)
        assert Queue(client, "default", prefix=prefix).submit([1], handler="echo").total == 1
    finally:
        client.close()


def test_a_single_server_gives_a_plain_client(redis_server: RedisServer, prefix: str) -> None:
    with connect(redis_server.url.replace("/0", "/3")) as client:
        assert type(client) is redis.Redis
        assert client.get_connection_kwargs()["db"] == 3
        assert Queue(client, "q", prefix=prefix).submit(["x"], handler="echo").total == 1


def test_no_node_answering_is_redis_unavailable_at_once_naming_each_without_the_password(
) -> None:
    a, b = free_port(), free_port()
    started = time.monotonic()
    with pytest.raises(RedisUnavailable) as raised:
        connect(f"redis://:hunter2@127.0.0.1:{a},127.0.0.1:{b}/0")
    assert time.monotonic() - started < 1  # refused: no retries with backoff
    message = str(raised.value)
    assert f"Redis is unreachable at redis://:***@127.0.0.1:{a},127.0.0.1:{b}/0" in message
    assert f"127.0.0.1:{a}: " in message and f"127.0.0.1:{b}: " in message
    assert "hunter2" not in message


@pytest.fixture
def mute_port() -> Iterator[int]:
    """A port where the kernel completes the TCP handshake but nothing ever answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def test_a_node_that_never_answers_is_given_up_after_the_connect_timeout(mute_port: int) -> None:
    started = time.monotonic()
    with pytest.raises(RedisUnavailable, match=f"127.0.0.1:{mute_port}: Timeout"):
        connect(f"redis://127.0.0.1:{mute_port}/0", socket_connect_timeout=0.3)
    assert time.monotonic() - started < 1.5


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("http://127.0.0.1:6379", "unknown scheme 'http'"),
        ("127.0.0.1:6379", "no scheme://"),
        ("redis://127.0.0.1:port/0", "Port could not be cast"),
        ("redis://127.0.0.1:99999/0", "Port out of range"),
        ("redis://h1:7000,,h2:7001/0", "a node without a host name"),
        ("redis://h1:7000/zero", "the database must be a number, not 'zero'"),
        ("unix://", "no socket path"),
    ],
)
def test_a_bad_url_is_invalid_input_naming_it(url: str, why: str) -> None:
    with pytest.raises(InvalidInput, match="is not a Redis URL") as raised:
        connect(url)
    assert why in str(raised.value)
    assert repr(url) in str(raised.value)


def test_a_cluster_has_only_database_0(cluster_layout: ClusterLayout) -> None:
    with pytest.raises(InvalidInput, match="a Redis Cluster has only 0"):
        connect(cluster_layout.url.replace("/0", "/2"))


def test_several_nodes_must_be_a_cluster(redis_server: RedisServer) -> None:
    node = f"127.0.0.1:{redis_server.port}"
    with pytest.raises(InvalidInput, match=f"but {node} is not a node of a Redis Cluster"):
        connect(f"redis://{node},{node}/0")


def test_seeds_carry_the_credentials_database_and_options_of_the_url() -> None:
    assert seeds("redis://u:p@h1:7000,[::1]:7001/0?ssl_cert_reqs=none") == [
        "redis://u:p@h1:7000/0?ssl_cert_reqs=none",
        "redis://u:p@[::1]:7001/0?ssl_cert_reqs=none",
    ]
    assert seeds("redis://") == ["redis://"]  # alone, an empty host is localhost, as in redis-py


def test_redacted_hides_the_password_of_any_url() -> None:
    assert redacted("redis://u:p@h1:7000,h2:7001/0") == "redis://u:***@h1:7000,h2:7001/0"
    assert redacted("rediss://:p@w@h:1/0") == "rediss://:***@h:1/0"
    assert redacted("redis://h:1/0") == "redis://h:1/0"
    assert redacted("nonsense") == "nonsense"

"""A Redis client from a URL: a single server, or a Redis Cluster reached through any of its
nodes (`redis://h1:7000`) or through a list of seed nodes (`redis://h1:7000,h2:7001`).

Whether the node is part of a cluster is asked of the node itself (`INFO cluster`), so one
setting serves both. Bad URLs are InvalidInput; no node answering is RedisUnavailable, after
at most `socket_connect_timeout` per seed, never a hang.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.connection import parse_url as _untyped_parse_url
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from .errors import InvalidInput, RedisUnavailable

Client: TypeAlias = redis.Redis | RedisCluster

CONNECT_TIMEOUT_S = 5.0
SCHEMES = ("redis", "rediss", "unix")
EXPECTED = (
    "expected redis://host:port/db, rediss://..., unix:///path.sock, or the nodes of a Redis "
    "Cluster as redis://host1:port1,host2:port2"
)
_parse_url: Callable[[str], dict[str, Any]] = _untyped_parse_url
# scheme, then the authority (userinfo and host list) up to the path, query or fragment.
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<authority>[^/?#]*)(?P<rest>.*)", re.S)


def connect(url: str, *, cluster: bool | None = None, **kwargs: Any) -> Client:
    """A client for the Redis at `url`, with decode_responses=True: a RedisCluster when the
    node it names is part of a cluster (`cluster=None` asks the first seed that answers;
    True or False says so and skips the question). Other keyword arguments go to the client.
    Raises InvalidInput for a bad URL, RedisUnavailable when no seed answers."""
    kwargs = {"socket_connect_timeout": CONNECT_TIMEOUT_S, **kwargs, "decode_responses": True}
    nodes = seeds(url)
    if cluster is False:
        if len(nodes) > 1:
            raise InvalidInput(f"{redacted(url)!r} names several nodes, which only a cluster has")
        return _single(nodes[0], kwargs)
    if cluster is True:
        return _cluster(url, nodes[0], kwargs)
    failures = []
    for node in nodes:
        try:
            is_cluster = _cluster_enabled(node, kwargs)
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            failures.append(f"{_where(node)}: {exc}")
            continue
        if is_cluster:
            return _cluster(url, node, kwargs)
        if len(nodes) > 1:
            raise InvalidInput(
                f"{redacted(url)!r} names several nodes, but {_where(node)} is not a node of a "
                "Redis Cluster; name a single server alone"
            )
        return _single(node, kwargs)
    raise RedisUnavailable(f"Redis is unreachable at {redacted(url)} ({'; '.join(failures)})")


def seeds(url: str) -> list[str]:
    """One URL per node named by `url` (`redis://:pw@h1:7000,h2:7001/0` gives
    `redis://:pw@h1:7000/0` and `redis://:pw@h2:7001/0`), each checked; InvalidInput if not."""
    match = _URL.fullmatch(url.strip())
    if match is None:
        raise _bad(url, "no scheme://")
    scheme = match["scheme"].lower()
    if scheme not in SCHEMES:
        raise _bad(url, f"unknown scheme {scheme!r}")
    if scheme == "unix":
        nodes = [url.strip()]
    else:
        userinfo, at, hosts = match["authority"].rpartition("@")
        nodes = [f"{scheme}://{userinfo}{at}{host}{match['rest']}" for host in hosts.split(",")]
    for node in nodes:
        try:
            parts = urlsplit(node)
            parts.port  # noqa: B018 -- raises ValueError for a port that is not 0-65535
            options = _parse_url(node)
        except ValueError as exc:
            raise _bad(url, str(exc)) from exc
        if scheme != "unix" and not parts.hostname and len(nodes) > 1:
            raise _bad(url, "a node without a host name")  # alone, it means localhost
        if scheme == "unix" and not options.get("path"):
            raise _bad(url, "no socket path")
        if scheme != "unix" and not re.fullmatch(r"/?\d*", parts.path):
            raise _bad(url, f"the database must be a number, not {parts.path[1:]!r}")
    return nodes


def redacted(url: str) -> str:
    """`url` with any password replaced by ***, for messages and logs."""
    match = _URL.fullmatch(url)
    if match is None or "@" not in match["authority"]:
        return url
    userinfo, _, hosts = match["authority"].rpartition("@")
    user, colon, _password = userinfo.partition(":")
    hidden = f"{user}:***" if colon else userinfo
    return f"{match['scheme']}://{hidden}@{hosts}{match['rest']}"


def _bad(url: str, why: str) -> InvalidInput:
    return InvalidInput(f"{redacted(url)!r} is not a Redis URL ({why}); {EXPECTED}")


def _where(node: str) -> str:
    parts = urlsplit(node)
    return parts.path if parts.scheme == "unix" else f"{parts.hostname}:{parts.port or 6379}"


def _single(node: str, kwargs: dict[str, Any]) -> redis.Redis:
    return redis.Redis.from_url(node, **kwargs)


def _cluster_enabled(node: str, kwargs: dict[str, Any]) -> bool:
    """Ask `node` whether it runs in cluster mode: one try, reads bounded like the connect."""
    timeout = kwargs.get("socket_connect_timeout") or CONNECT_TIMEOUT_S
    # Database 0: a cluster node refuses SELECT, and the URL's own database is checked later.
    options = {**kwargs, **_parse_url(node), "db": 0}
    options |= {"socket_timeout": timeout, "retry": Retry(NoBackoff(), 0)}
    probe = redis.Redis(connection_pool=redis.ConnectionPool(**options))
    try:
        try:
            return bool(int(probe.info("cluster").get("cluster_enabled", 0)))
        except redis.ResponseError:
            # INFO refused (an ACL, a proxy): only a cluster node answers CLUSTER MYID.
            try:
                probe.cluster("MYID")
            except redis.ResponseError:
                return False
            return True
    finally:
        probe.close()


def _cluster(url: str, node: str, kwargs: dict[str, Any]) -> RedisCluster:
    """A cluster client bootstrapped from `node` (it learns every other node from it)."""
    if urlsplit(node).scheme == "unix":
        raise InvalidInput(
            f"{redacted(url)!r} is a Redis Cluster node; a cluster is reached over TCP "
            "(redis://host:port)"
        )
    # The URL's options win over keyword arguments, as in redis-py's from_url(). Not passed
    # through a URL, so that no `db` stays in the client's connection kwargs: a RedisCluster
    # built again from them (the worker's heartbeat process) would refuse it.
    options = {**kwargs, **_parse_url(node)}
    if options.pop("db", 0) != 0:
        raise InvalidInput(
            f"{redacted(url)!r} names a database other than 0; a Redis Cluster has only 0"
        )
    try:
        return RedisCluster(**options)
    except (redis.RedisError, RedisClusterException) as exc:
        # Slots not all served (a node down, a failover under way), or no node answering.
        raise RedisUnavailable(
            f"the Redis Cluster at {redacted(url)} is not ready ({exc})"
        ) from exc


def client_spec(client: Any) -> tuple[Any, ...]:
    """What a child process needs to connect as `client` does (picklable settings only)."""
    if hasattr(client, "nodes_manager"):
        # A cluster has no databases: a copied db=0 would make RedisCluster refuse to start.
        kwargs = _picklable(client.nodes_manager.connection_kwargs)
        kwargs.pop("db", None)
        nodes = [(n.host, n.port) for n in client.get_nodes()]
        return ("cluster", nodes, kwargs)
    pool = client.connection_pool
    return ("single", pool.connection_class, _picklable(pool.connection_kwargs))


def _picklable(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in kwargs.items():
        try:
            pickle.dumps(v)
        except Exception:  # e.g. a Retry or a credential provider: the defaults do
            continue
        out[k] = v
    return out


def client_from_spec(spec: tuple[Any, ...]) -> Any:
    """The client that client_spec() describes, made again (in another process)."""
    if spec[0] == "cluster":
        from redis.cluster import ClusterNode, RedisCluster

        nodes = [ClusterNode(h, p) for h, p in spec[1]]  # type: ignore[no-untyped-call]
        return RedisCluster(startup_nodes=nodes, **spec[2])
    return redis.Redis(connection_pool=redis.ConnectionPool(connection_class=spec[1], **spec[2]))

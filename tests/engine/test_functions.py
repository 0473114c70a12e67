"""The engine as one Redis Functions library: how it is built from lua/, loaded once, loaded
again when Redis has lost it, versioned, and called on a Redis Cluster through any node."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode
from redis.cluster import RedisCluster as ClusterClient

from core.queue import Queue, QueueError
from core.queue.scripts import SCRIPT_NAMES, build, call, library, load
from core.stack.redis_server import RedisCluster, RedisServer, start_redis
from tests.conftest import FakeClock

# The smallest helper set: base (begin) and finish, which every operation gets.
BASE = "local X = 1\nlocal function begin(keys) end\n"
FINISH = "--@include base\nlocal function finish(result) X = 2 return result end\n"


def fake_files(files: dict[str, str]) -> Callable[[str], str]:
    def read(name: str) -> str:
        try:
            return {"_base": BASE, "_finish": FINISH, **files}[name]
        except KeyError:
            raise FileNotFoundError(name) from None

    return read


def test_the_library_holds_each_helper_once_and_every_operation_as_a_function() -> None:
    files = {
        "_h": "--@include base\nlocal function h() return X end\n",
        "a": "--[[ a: header ]]\n--@include h\nreturn h(ARGV[1])\n",
        "b": "--@include h\nif KEYS[9] then return h() end\nreturn 2\n",
    }
    lib = build(["a", "b"], read=fake_files(files))
    assert re.fullmatch(r"qa_[0-9a-f]{8}", lib.name)
    assert lib.text.startswith(f"#!lua name={lib.name}\n")
    assert lib.text.count("local function begin(keys)") == 1
    assert lib.text.count("local function h()") == 1
    assert "--@include" not in lib.text
    assert lib.functions == {"a": f"{lib.name}_a", "b": f"{lib.name}_b"}
    for op in ("a", "b"):
        # Each body runs inside its function, after begin(KEYS).
        assert (
            f"redis.register_function('{lib.name}_{op}', function(KEYS, ARGV)\nbegin(KEYS)\n"
            "return finish((function()\n"
            in lib.text
        )
    # Each helper after the helpers it includes, all before the functions.
    at = lib.text.index
    assert at("local X = 1") < at("local function finish") < at("register_function")
    assert at("local X = 1") < at("local function h()") < at("register_function")


def test_the_library_name_follows_its_text() -> None:
    files = {"a": "return 1\n"}
    one = build(["a"], read=fake_files(files))
    assert build(["a"], read=fake_files(files)) == one
    files["a"] = "return 2\n"
    two = build(["a"], read=fake_files(files))
    assert two.name != one.name and two.functions["a"] != one.functions["a"]


def test_a_bad_include_fails_the_build_clearly() -> None:
    with pytest.raises(LookupError, match=r"--@include zzz in a\.lua: no file lua/_zzz\.lua"):
        build(["a"], read=fake_files({"a": "--@include zzz\n"}))
    cycle = {"_g": "--@include h\nlocal function g() return h() end\n",
             "_h": "--@include g\nlocal function h() return g() end\n", "a": "--@include h\n"}
    with pytest.raises(ValueError, match="in a cycle: a -> h -> g -> h"):
        build(["a"], read=fake_files(cycle))
    with pytest.raises(ValueError, match="must define `local function begin"):
        build(["a"], read=lambda n: {"_base": "local X = 1\n", "_finish": FINISH,
                                     "a": "return 1\n"}[n])
    with pytest.raises(ValueError, match="must define `local function finish"):
        build(["a"], read=lambda n: {"_base": BASE, "_finish": "--@include base\nX = 1\n",
                                     "a": "return 1\n"}[n])


def test_a_file_includes_what_it_uses_and_only_that() -> None:
    """The loader checks each operation and helper: a helper's name used without its
    include, or an include of which nothing is used, fails the build; a name in a comment
    or a string, or a field of the same name (h.g), is not a use."""
    helpers = {"_g": "--@include base\nlocal function g() return X end\nlocal G_MAX = 3\n",
               "_h": "--@include base g\nlocal function h() return g() end\n"}
    ok = {**helpers, "a": "--@include h g\n-- g() in a comment\nlocal t = {g = 'g()'}\n"
                          "return h() + G_MAX + t.g\n"}
    build(["a"], read=fake_files(ok))
    hidden = {**helpers, "a": "--@include h\nreturn h() + g()\n"}  # g only through h
    with pytest.raises(ValueError, match=r"lua/a\.lua uses g without including it"):
        build(["a"], read=fake_files(hidden))
    unused = {**helpers, "a": "--@include h g\nreturn h()\n"}
    with pytest.raises(ValueError, match=r"lua/a\.lua includes g but uses nothing of it"):
        build(["a"], read=fake_files(unused))
    in_helper = {"_g": helpers["_g"],
                 "_h": "--@include base\nlocal function h() return g() end\n",
                 "a": "--@include h\nreturn h()\n"}
    with pytest.raises(ValueError, match=r"lua/_h\.lua uses g without including it"):
        build(["a"], read=fake_files(in_helper), known=["g"])


def test_every_operation_is_in_the_engine_library() -> None:
    lib = library()
    assert set(lib.functions) == set(SCRIPT_NAMES)
    assert lib.text.count("local function begin(keys)") == 1


def test_the_engines_lua_files_include_what_they_use_and_only_that() -> None:
    """The check a process's start leaves out (library() builds without it), on lua/ itself:
    built with it, the library is the same one."""
    assert build() == library()


def libraries(client: redis.Redis) -> dict[str, set[str]]:
    """FUNCTION LIST as library name -> its function names (RESP2 replies are flat lists)."""
    out = {}
    for flat in client.function_list():
        lib = dict(zip(flat[::2], flat[1::2], strict=True))
        out[lib["library_name"]] = {
            dict(zip(f[::2], f[1::2], strict=True))["name"] for f in lib["functions"]
        }
    return out


def function_loads(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_function|load", {}).get("calls", 0))


def test_the_library_is_loaded_once_and_again_after_redis_lost_it(
    redis_client: redis.Redis, redis_server: RedisServer, queue: Queue, prefix: str
) -> None:
    redis_client.function_flush()  # the suite's own server: as after a restart without AOF
    before = function_loads(redis_client)
    queue.submit([1, 2], request_id="r", handler="echo")
    other = Queue(
        redis.Redis.from_url(redis_server.url, decode_responses=True),
        "q",
        prefix=prefix,
        clock=FakeClock(),
    )  # another client: nothing to load
    leases = other.dequeue("w", 2)
    queue.ack(leases[0])
    assert function_loads(redis_client) == before + 1  # by the first call, not again
    assert libraries(redis_client) == {library().name: set(library().functions.values())}

    redis_client.function_flush()
    assert other.ack_many([leases[1]]) == [True]  # reloaded on "Function not found"
    assert queue.state("r") == "done"
    assert function_loads(redis_client) == before + 2


def test_nothing_set_by_one_call_is_seen_by_the_next(
    redis_client: redis.Redis, prefix: str, clock: FakeClock
) -> None:
    a = Queue(redis_client, "a", prefix=prefix, clock=clock)
    b = Queue(redis_client, "b", prefix=prefix)  # the Redis server's clock
    a.submit([1], request_id="r", max_attempts=2, backoff_ms=1000, handler="echo")
    a.fail(a.dequeue("w", 1)[0], "boom")
    clock.advance(5000)
    b.submit([2], request_id="r", handler="echo")
    # b's dequeue promotes due retries of b (none) and takes b's task, on b's clock...
    [got] = b.dequeue("w", 5)
    assert (got.payload, got.request_id) == (2, "r")
    expiry = redis_client.zscore(b.keys.leases, got.lease)
    assert expiry is not None and abs(expiry - (b.now_ms() + 30_000)) < 5_000
    # ...and a's next call still promotes a's due retry: no state of b's call is left over.
    [retried] = a.dequeue("w", 5)
    assert (retried.payload, retried.attempt) == (1, 2)


def test_two_versions_of_the_library_serve_one_redis_side_by_side(
    redis_client: redis.Redis, queue: Queue
) -> None:
    current = library()
    newer = build(read=lambda name: library_file(name) + ("-- v2\n" if name == "_base" else ""))
    assert newer.name != current.name
    load(redis_client, current)
    load(redis_client, newer)
    keys = [*queue.keys.script_keys, queue.keys.request("r"), queue.keys.tasks("r")]
    args = ["r", 0, 50, 10, "default", "echo", 3, 30_000, 86_400_000, 1000, 300_000, "", 1,
            "", "", "", b"7"]  # ...no resources, mode 1 (sealed), due "" (now), no unique key,
    # no trace context, one payload
    assert call(redis_client, newer, "submit", keys, args)[0] == 1
    assert call(redis_client, current, "submit", keys, args)[0] == 0  # idempotent: exists
    assert [lease.payload for lease in queue.dequeue("w", 5)] == [7]
    assert {current.name, newer.name} <= set(libraries(redis_client))
    redis_client.function_delete(newer.name)


def library_file(name: str) -> str:
    return (Path(__file__).resolve().parents[2] / "core/queue/lua" / f"{name}.lua").read_text()


# -- Redis Cluster -------------------------------------------------------------------------


def node_client(port: int) -> redis.Redis:
    return redis.Redis(host="127.0.0.1", port=port, decode_responses=True)


def test_on_a_cluster_the_library_is_loaded_where_needed_and_reloaded_where_lost(
    redis_cluster: RedisCluster,
) -> None:
    """On the suite's cluster (tests/conftest.py): the libraries flushed from every node here
    are loaded again by whichever test next runs an operation there, as this one shows."""
    cluster = redis_cluster
    nodes = [node_client(port) for _, port in cluster.startup_nodes]
    for n in nodes:
        n.function_flush()
    prefix = "f" + uuid.uuid4().hex[:8]
    seed = ClusterClient(
        startup_nodes=[ClusterNode(*cluster.startup_nodes[0])], decode_responses=True
    )
    # A queue none of whose keys lives on the node the client was given.
    name = next(
        f"q{i}"
        for i in range(100)
        if seed.get_node_from_key(Queue(seed, f"q{i}", prefix=prefix).keys.ready).port
        != cluster.startup_nodes[0][1]
    )
    q = Queue(seed, name, prefix=prefix, clock=FakeClock())
    owner = node_client(seed.get_node_from_key(q.keys.ready).port)
    getkeys = lambda: sum(  # noqa: E731
        int(n.info("commandstats").get("cmdstat_command|getkeys", {}).get("calls", 0))
        for n in nodes
    )
    asked = getkeys()

    q.submit([1, 2, 3], request_id="r", handler="echo")
    # Loaded on the shard that needed it (a primary that is down elsewhere cannot fail it).
    assert set(libraries(owner)) == {library().name}
    q.prepare()  # what a worker does at start: every reachable primary
    for n in nodes:
        assert set(libraries(n)) == {library().name}

    owner.function_flush()  # the node that owns the queue lost it (restart, new node)
    leases = q.dequeue("w", 3)
    assert [lease.payload for lease in leases] == [1, 2, 3]
    assert q.ack_many(leases) == [True] * 3
    assert q.state("r") == "done"
    assert getkeys() == asked  # calls are routed by their keys' slot, not by asking a node
    seed.close()


def test_a_redis_without_functions_is_a_clear_error(tmp_path: Path, prefix: str) -> None:
    """Redis before 7.0 has no FUNCTION/FCALL; a server with them renamed away answers the
    same "unknown command". Producers and workers get a message naming the version needed."""
    server = start_redis(tmp_path / "old", appendonly=False,
                         extra=["--rename-command", "FCALL", "", "--rename-command", "FUNCTION",
                                ""])
    client = redis.Redis.from_url(server.url, decode_responses=True)
    try:
        q = Queue(client, "q", prefix=prefix)
        for attempt in (q.prepare, lambda: q.submit([1], handler="noop")):
            with pytest.raises(QueueError, match=r"needs Redis 7\.0 or newer"):
                attempt()
    finally:
        client.close()
        server.stop()

"""The engine's walls: only core/queue/ (its schedules in core/queue/schedule/ too) knows a
Redis key or the consumer group, and only the engine and core/conf.py hold a Redis client.
Everything else (the Django side, the stack, the commands, bench/) reads through
core.queue.read and writes through engine calls, so that the key layout lives in the
engine's keys.py files and the Lua alone, and what Redis answers is translated and
classified in one place. Checked on the source's syntax tree:

- no `<x>.keys.<key>` (the prefix aside), no command sent on `<x>.redis`, no key-shaped text;
- no redis-py imported; no command sent on a client (one that `redis_client()`, the engine's
  `connect()` or `client_from_spec()` made, or a parameter typed as one); no `<x>.redis` read
  but to close it. Handing core.conf's client straight to the engine (the queue registry,
  the schedulers, the reaper, Spark's warm-up marker) is how the Django side configures it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "core" / "queue"
ALLOWED_REDIS_CALLS = {"close"}  # closing a client is no command
# Where a Redis client may be made and used outside the engine, and why.
CLIENT_EXEMPT = {
    # The Django side's one client per URL (the engine's connect()), handed to get_queue().
    "core/conf.py",
    # The other task queues measured beside ours (huey, rq): their own clients on their own
    # keys, and the latency samples huey's task writes; nothing of the engine's.
    "bench/peers.py",
}
CLIENT_MAKERS = {"redis_client", "connect", "client_from_spec"}
CLIENT_TYPES = {"Redis", "StrictRedis", "RedisCluster", "Client"}


def sources() -> list[Path]:
    files = [*sorted((ROOT / "core").rglob("*.py")), *sorted((ROOT / "queueadmin").rglob("*.py")),
             *sorted((ROOT / "bench").rglob("*.py"))]
    return [f for f in files if not f.is_relative_to(ENGINE)
            and "migrations" not in f.parts]


def breaches(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}"
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "keys" and node.attr != "prefix"):
            found.append(f"{where}: .keys.{node.attr}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "redis"
                and node.func.attr not in ALLOWED_REDIS_CALLS):
            found.append(f"{where}: .redis.{node.func.attr}()")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                ":{" in node.value or ":req:" in node.value or ":tasks" in node.value):
            found.append(f"{where}: key-shaped text {node.value[:40]!r}")
    return found


def _makes_client(node: ast.expr) -> bool:
    """Whether `node` is a call of a client maker (connect() by its bare name only: another
    library's x.connect() makes no Redis client)."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func
    if isinstance(func, ast.Name):
        return func.id in CLIENT_MAKERS
    return isinstance(func, ast.Attribute) and func.attr in CLIENT_MAKERS - {"connect"}


def _clients(tree: ast.AST) -> set[str]:
    """Names that hold a client in this module: bound to a client maker's call, or
    parameters typed as a client (redis.Redis, RedisCluster, connect.Client)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None \
                and _makes_client(node.value):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        if isinstance(node, ast.arg) and node.annotation is not None:
            kinds = {part.strip().split(".")[-1]
                     for part in ast.unparse(node.annotation).strip("'\"").split("|")}
            if kinds & CLIENT_TYPES:
                names.add(node.arg)
    return names


def client_breaches(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    clients = _clients(tree)
    closing = {id(n.func.value) for n in ast.walk(tree)
               if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
               and n.func.attr in ALLOWED_REDIS_CALLS}
    found = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] == "redis"]
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "redis" \
                and not node.level:
            found.append(f"{where}: from {node.module} import")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr not in ALLOWED_REDIS_CALLS):
            held = node.func.value
            if (isinstance(held, ast.Name) and held.id in clients) or _makes_client(held):
                found.append(f"{where}: a Redis client's .{node.func.attr}()")
        if isinstance(node, ast.Attribute) and node.attr == "redis" \
                and isinstance(node.ctx, ast.Load) and id(node) not in closing:
            found.append(f"{where}: .redis")
    return found


def test_the_walk_sees_the_modules_that_once_reached_into_redis() -> None:
    names = {str(p.relative_to(ROOT)) for p in sources()}
    assert {"core/views/pending.py", "core/pipeline/jobs.py", "core/mirror/apply.py",
            "core/console/aggregates.py", "core/cli/ops.py", "core/views/service.py",
            "core/worker/beat.py", "bench/bench_queue.py", "bench/handlers.py"} <= names


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_outside_the_engine_touches_a_redis_key(path: Path) -> None:
    assert breaches(path) == []


@pytest.mark.parametrize("path", [p for p in sources()
                                  if str(p.relative_to(ROOT)) not in CLIENT_EXEMPT],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_outside_the_engine_holds_a_redis_client(path: Path) -> None:
    assert client_breaches(path) == []


def test_the_check_finds_a_breach(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f(q):\n    q.redis.hget(q.keys.request('r'), 'state')\n"
                   "    return 'qa:{q}:req:x'\n")
    assert len(breaches(bad, tmp_path)) == 3


def test_the_check_finds_a_client_held_outside_the_engine(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import redis\n"
        "from redis.cluster import RedisCluster\n"
        "from core.conf import redis_client\n"
        "def health(q, other: redis.Redis):\n"
        "    client = redis_client()\n"
        "    client.info()\n"  # a command on a client it made
        "    redis_client().config_get('appendfsync')\n"
        "    other.ping()\n"  # on a client it was handed
        "    spark_warming.read(q.redis, prefix='qa')\n"  # reaching for a queue's client
        "    q.redis.close()\n"  # allowed: closing is no command
        "    return read.queues(redis_client(), prefix='qa')\n"  # allowed: handed to the engine
    )
    found = client_breaches(bad, tmp_path)
    assert [f.split(": ", 1)[1] for f in found] == [
        "import redis", "from redis.cluster import", "a Redis client's .info()",
        "a Redis client's .config_get()", "a Redis client's .ping()", ".redis"], found


def test_the_exempt_modules_are_there_and_need_it() -> None:
    for name in CLIENT_EXEMPT:
        assert client_breaches(ROOT / name), f"{name} holds no client any more: unexempt it"

"""The engine's walls: only core/queue/ (its schedules in core/queue/schedule/ too) knows a
Redis key or the consumer group. Everything else reads through core.queue.introspect and
writes through engine calls, so that the key layout lives in the engine's keys.py files and
the Lua alone. Checked on the source's syntax tree:
no `<x>.keys.<key>` (the prefix aside), no command sent on `<x>.redis`, no key-shaped text."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "core" / "queue"
ALLOWED_REDIS_CALLS = {"close"}  # closing a client is no command


def sources() -> list[Path]:
    files = [*sorted((ROOT / "core").rglob("*.py")), *sorted((ROOT / "queueadmin").rglob("*.py"))]
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


def test_the_walk_sees_the_modules_that_once_reached_into_redis() -> None:
    names = {str(p.relative_to(ROOT)) for p in sources()}
    assert {"core/views/pending.py", "core/pipeline/jobs.py", "core/mirror/apply.py",
            "core/console/aggregates.py", "core/cli/ops.py"} <= names


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_outside_the_engine_touches_a_redis_key(path: Path) -> None:
    assert breaches(path) == []


def test_the_check_finds_a_breach(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("def f(q):\n    q.redis.hget(q.keys.request('r'), 'state')\n"
                   "    return 'qa:{q}:req:x'\n")
    assert len(breaches(bad, tmp_path)) == 3

"""The house plan holds (issue 34): every import in core/ points down the layers, no module
imports itself through a circle, no function is over 60 lines and no module over 500. Read
from the code's own syntax trees, so a change that breaks one fails here the day it lands.

Layers, lowest first (an import may go to a lower rank, or within its own package): the
engine (core.queue) and the leaves beside it; the Django settings' door (core.conf); the
worker runtime; the pipeline and the database models; the mirror; the operations (core.ops);
the console's shared code; the pages, the command line and the stack beside them; and what
wires them (commands, urls, admin, apps).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "core"
RANK = {
    "queue": 0, "procs": 0, "sample": 0, "errors": 0,
    # OpenTelemetry (issue 38): the engine's trace hook set, the worker's and pipeline's spans.
    "conf": 1, "tracing": 1,
    "worker": 2,
    "pipeline": 3, "models": 3,
    "mirror": 4,
    # The alerts read the engine, the history and the mirror's figures, and are read by the
    # console, the command line and the services process: beside the operations, which
    # write their rules (through core.models), neither importing the other.
    "ops": 5, "alerts": 5,
    "console": 6,
    # The HTTP API (issue 38) is a front end like the pages: it parses, calls ops, renders.
    "views": 7, "templatetags": 7, "cli": 7, "api": 7,
    "stack": 8,
    "management": 9, "urls": 9, "admin": 9, "apps": 9,
}
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500


def modules() -> dict[str, Path]:
    out = {}
    for path in CORE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """The core modules `name` imports (anywhere in it, functions included), with the line."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            # `from pkg import sub` imports the module pkg.sub; `from pkg import Name`, pkg.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("core") and target != name:
                yield target, node.lineno


def layer(name: str) -> str:
    return name.split(".")[1] if "." in name else name


def test_every_import_points_down_the_layers() -> None:
    known = modules()
    assert set(map(layer, known)) <= set(RANK) | {"core"}, "a package without a layer: add it"
    up = []
    for name, path in known.items():
        for target, line in imports(name, path, known):
            a, b = layer(name), layer(target)
            if a != b and RANK.get(b, -1) >= RANK.get(a, 99):
                up.append(f"{path.relative_to(ROOT)}:{line} imports {target} ({a} -> {b})")
    assert up == [], "imports up the layers:\n" + "\n".join(up)


def test_no_module_imports_itself_through_a_circle() -> None:
    known = modules()
    edges = defaultdict(set)
    for name, path in known.items():
        edges[name] = {t for t, _ in imports(name, path, known)}
    circles, index, low, stack, on = [], {}, {}, [], set()

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert circles == [], f"import circles: {circles}"


def test_no_function_over_60_lines_and_no_module_over_500() -> None:
    long_functions, long_modules = [], []
    for name, path in modules().items():
        text = path.read_text()
        if (n := text.count("\n")) > MAX_MODULE_LINES:
            long_modules.append(f"{name}: {n} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if lines > MAX_FUNCTION_LINES:
                    long_functions.append(f"{name}.{node.name}: {lines} lines")
    assert long_modules == [], f"modules over {MAX_MODULE_LINES} lines: {long_modules}"
    assert long_functions == [], f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"

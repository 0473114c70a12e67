"""The code's layout, measured from its own syntax trees (issue 34): modules and functions by
size, imports up the layers and circles (the rules tests/stack/test_layers.py holds), and a
console data job submit followed through the code: the shortest chain of calls from the
page's view to the engine's atomic submit, with the functions ("stops") and files on it.
Prints a table and JSON.

    .venv/bin/python bench/bench_layout.py [--json-only]

The call chain is found on a call graph built by name: `f(...)` is the function `f` of the
same module or the one imported as `f`; `module.f(...)` that module's `f`; `x.f(...)` on
anything else may be any function or method named `f` in core (so the chain found is never
longer than the real one; it is printed, to be checked by eye).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.stack.test_layers import (  # noqa: E402
    MAX_FUNCTION_LINES,
    MAX_MODULE_LINES,
    RANK,
    imports,
    layer,
    modules,
)

START = "core.views.datajobs.job_submit"
END = "core.queue.produce.Producer.submit_flow"


def functions(known: dict[str, Path]) -> dict[str, tuple[str, ast.AST]]:
    """Every function and method of core: qualified name -> (module, node)."""
    out: dict[str, tuple[str, ast.AST]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                out[f"{name}.{node.name}"] = (name, node)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        out[f"{name}.{node.name}.{item.name}"] = (name, item)
    return out


def aliases(path: Path, known: dict[str, Path]) -> dict[str, str]:
    """What each imported name of a module stands for: a module or a module's name."""
    out: dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("core"):
            for a in node.names:
                out[a.asname or a.name] = f"{node.module}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("core"):
                    out[a.asname or a.name] = a.name
    return out


def call_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    funcs = functions(known)
    by_short: dict[str, set[str]] = {}
    for q in funcs:
        by_short.setdefault(q.rsplit(".", 1)[1], set()).add(q)
    graph: dict[str, set[str]] = {}
    for qual, (module, node) in funcs.items():
        names = aliases(known[module], known)
        cls = qual[len(module) + 1:].rpartition(".")[0]
        out: set[str] = set()
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
            f = call.func
            if isinstance(f, ast.Name):
                for cand in (f"{module}.{f.id}", names.get(f.id, "")):
                    if cand in funcs:
                        out.add(cand)
            elif isinstance(f, ast.Attribute):
                base = f.value
                own = f"{module}.{cls}.{f.attr}"
                if isinstance(base, ast.Name) and base.id == "self" and cls and own in funcs:
                    out.add(own)
                    continue
                if isinstance(base, ast.Name) and base.id in names:
                    target = f"{names[base.id]}.{f.attr}"
                    if target in funcs:
                        out.add(target)
                        continue
                out |= by_short.get(f.attr, set())
        graph[qual] = out - {qual}
    return graph


def shortest(graph: dict[str, set[str]], start: str, end: str) -> list[str]:
    seen = {start: ""}
    todo = deque([start])
    while todo:
        v = todo.popleft()
        if v == end:
            path = [v]
            while seen[path[-1]]:
                path.append(seen[path[-1]])
            return path[::-1]
        for w in sorted(graph.get(v, ())):
            if w not in seen:
                seen[w] = v
                todo.append(w)
    return []


def measure() -> dict[str, Any]:
    known = modules()
    sizes, longest = [], []
    for name, path in known.items():
        text = path.read_text()
        sizes.append((text.count("\n"), name))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                longest.append((node.end_lineno - node.lineno + 1, f"{name}.{node.name}"))
    up = [f"{n} -> {t}" for n, p in known.items() for t, _ in imports(n, p, known)
          if layer(n) != layer(t) and RANK.get(layer(t), -1) >= RANK.get(layer(n), 99)]
    path = shortest(call_graph(known), START, END)
    files = sorted({q.split(".")[0] + "/" + "/".join(q.split(".")[1:-1]) for q in path})
    modules_on = list(dict.fromkeys(".".join(q.split(".")[:3]) if q.count(".") > 2 else q
                                    for q in path))
    return {
        "modules": len(known),
        "modules_over_500": sum(1 for n, _ in sizes if n > MAX_MODULE_LINES),
        "largest_module": max(sizes),
        "functions_over_60": sum(1 for n, _ in longest if n > MAX_FUNCTION_LINES),
        "longest_function": max(longest),
        "imports_up": len(up),
        "submit_path_stops": len(path),
        "submit_path_files": len({_file_of(q, known) for q in path}),
        "submit_path": path,
        "_modules_on_path": modules_on,
        "_files": files,
    }


def _file_of(qual: str, known: dict[str, Path]) -> str:
    parts = qual.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in known:
            return str(known[".".join(parts[:i])].relative_to(ROOT))
    return qual


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()
    result = measure()
    shown = {k: v for k, v in result.items() if not k.startswith("_")}
    if not args.json_only:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="layout of core/", title_justify="left")
        table.add_column("measure")
        table.add_column("value", justify="right")
        table.add_column("target", justify="right")
        targets = {"modules_over_500": 0, "functions_over_60": 0, "imports_up": 0,
                   "submit_path_stops": "≤ 15", "submit_path_files": "≤ 10"}
        for key, value in shown.items():
            if key != "submit_path":
                table.add_row(key, str(value), str(targets.get(key, "")))
        console = Console(stderr=True, width=120)
        console.print(table)
        console.print("the console's data job submit, view to engine:")
        for i, q in enumerate(result["submit_path"], 1):
            console.print(f"  {i:2d}. {q}")
    print(json.dumps(shown, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

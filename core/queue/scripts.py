"""The engine's Lua operations as one Redis Functions library, and the calls into it.

Each operation stays one file, lua/<name>.lua: a contract header, then a body that reads
`KEYS` and `ARGV` and `return`s, as a script would. Its `--@include a b ...` lines name the
helper files it uses, lua/_a.lua ...; a helper file names the helpers it uses the same way.
Include what you use, and only that: the loader checks that every helper a file calls is one
it includes, that it includes none it does not call, and that helpers include each other
without a cycle (BullMQ's `includes/` are the model). Every operation also gets `finish`
(and through it `base`), which the loader's own wrapper calls.

The library is `#!lua name=<lib>`, every helper file any operation needs once, each after
the helpers it includes, then one `redis.register_function('<lib>_<name>', function(KEYS,
ARGV) ... end)` per operation around its body. Redis runs the helpers once, when it loads the
library, instead of at every call as it would a script's (~15 us a call); `begin(KEYS)`,
which `base` defines, is called first in every operation to set the queue's keys and reset
the state of one call, and `finish(result)` last, with the operation's result, to write what
the operation kept back until its end (request fields, stats) before it is returned.

The library is named by a hash of its text, so two versions of the code can share a Redis
during an upgrade. It is loaded on first use and again whenever Redis answers "Function not
found" (a restart without persistence, FUNCTION FLUSH, a new cluster node); on a Redis
Cluster it is loaded on every primary.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import Any

import redis

from .errors import QueueError

_INCLUDE = re.compile(r"^--@include ([\w ]+?)[ \t]*(?:\n|$)", re.MULTILINE)
# What every operation gets without naming it: the wrapper calls begin() and finish().
IMPLICIT = ("finish",)
LIBRARY_PREFIX = "qa"
_NOT_FOUND = "Function not found"

SCRIPT_NAMES = (
    "submit",
    "submit_after",
    "submit_flow",
    "add",
    "seal",
    "dequeue",
    "fail",
    "extend",
    "release",
    "reap",
    "cancel",
    "requeue",
    "claim",
    "pause",
    "resume",
    "delete_dead",
    "reclaim",
    "run_now",
    "progress",
    "control",
    "upgrade",
    "set_limit",
)


def _read(name: str) -> str:
    return files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def split_includes(text: str) -> tuple[str, list[str]]:
    """A file's text without its `--@include ...` lines, and the names they include."""
    return _INCLUDE.sub("", text), [n for line in _INCLUDE.findall(text) for n in line.split()]


# -- what a Lua file defines and uses (for the include check) ------------------------------

_LONG_OPEN = re.compile(r"\[(=*)\[")
_NAME = re.compile(r"(?<![\w.:])[A-Za-z_]\w*")
_TOP_FUNCTION = re.compile(r"^local function (\w+)", re.MULTILINE)
_TOP_LOCALS = re.compile(r"^local (?!function\b)([\w, ]+?)\s*(?:=|$)", re.MULTILINE)
_ASSIGNED = re.compile(r"^(\w+) = function\b", re.MULTILINE)


def code_of(text: str) -> str:
    """Lua text without its comments and with its string literals emptied: the names its
    code really uses. Line breaks are kept, so what starts a line still does."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            long = _LONG_OPEN.match(text, i + 2)
            if long:  # --[[ ... ]] or --[==[ ... ]==]
                end = text.find("]" + long.group(1) + "]", long.end())
                end = n if end < 0 else end + len(long.group(1)) + 2
                out.append("\n" * text.count("\n", i, end))
                i = end
            else:
                end = text.find("\n", i)
                i = n if end < 0 else end
            continue
        if c in "'\"":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append("''")
            i = j + 1
            continue
        long = _LONG_OPEN.match(text, i) if c == "[" else None
        if long:  # [[ ... ]] long string
            end = text.find("]" + long.group(1) + "]", long.end())
            end = n if end < 0 else end + len(long.group(1)) + 2
            out.append("''" + "\n" * text.count("\n", i, end))
            i = end
            continue
        out.append(c)
        i += 1
    return "".join(out)


def defined_by(text: str) -> set[str]:
    """The names a helper file defines at its top level (functions, locals, and a function
    assigned to a name it declared earlier)."""
    code = code_of(text)
    names = set(_TOP_FUNCTION.findall(code)) | set(_ASSIGNED.findall(code))
    for group in _TOP_LOCALS.findall(code):
        names |= {n.strip() for n in group.split(",") if n.strip()}
    return names


def used_by(text: str) -> set[str]:
    """Every name a file's code mentions (not as a field: `h.add` is not `add`)."""
    return set(_NAME.findall(code_of(text)))


@dataclass(frozen=True)
class Library:
    """A built library: its versioned name and the text FUNCTION LOAD takes."""

    name: str
    text: str
    functions: dict[str, str] = field(compare=False)  # operation -> registered function name


def helper_files() -> list[str]:
    """Every helper file in lua/ (by the name an include gives: `_tasks.lua` is "tasks")."""
    return sorted(p.name[1:-4] for p in files(__package__).joinpath("lua").iterdir()
                  if p.name.startswith("_") and p.name.endswith(".lua"))


class _Includes:
    """The helper files operations include, read once each, in an order where each comes
    after those it includes (a depth-first walk that refuses a cycle)."""

    def __init__(self, read: Callable[[str], str]) -> None:
        self.read = read
        self.helpers: dict[str, tuple[str, list[str]]] = {}  # name -> (text, its includes)
        self.order: list[str] = []
        self._state: dict[str, str] = {}

    def helper(self, name: str, by: str) -> tuple[str, list[str]]:
        if name not in self.helpers:
            try:
                text = self.read(f"_{name}")
            except FileNotFoundError as exc:
                raise LookupError(f"--@include {name} in {by}.lua: no file "
                                  f"lua/_{name}.lua") from exc
            self.helpers[name] = split_includes(text)
        return self.helpers[name]

    def visit(self, name: str, by: str, path: tuple[str, ...]) -> None:
        if self._state.get(name) == "done":
            return
        if self._state.get(name) == "open":
            raise ValueError("the helpers include each other in a cycle: "
                             + " -> ".join((*path, name)))
        self._state[name] = "open"
        for inc in self.helper(name, by)[1]:
            self.visit(inc, f"_{name}", (*path, name))
        self._state[name] = "done"
        self.order.append(name)


def build(names: Sequence[str] = SCRIPT_NAMES, read: Callable[[str], str] = _read,
          known: Sequence[str] | None = None, *, check: bool = True) -> Library:
    """The library of the operations `names`: the helper files they include (and those
    include), each once and after its own includes, then each operation as a registered
    function. `known`: every helper file there is (default: lua/'s), so that a name of one
    that nothing includes is caught too. Raises LookupError for a missing helper file,
    ValueError for an include cycle, a helper a file uses without including it or includes
    without using it, or helpers that do not define begin() and finish(). `check=False`
    leaves out the include check (a lint of lua/'s files, ~30 ms of pure Python: the tests run
    it; a process's start does not)."""
    includes = _Includes(read)
    bodies: list[tuple[str, str, list[str]]] = []
    for op in names:
        body, named = split_includes(read(op))
        for inc in (*IMPLICIT, *named):
            includes.visit(inc, op, (op,))
        bodies.append((op, body, named))
    if check:
        every = dict(includes.helpers)
        for other in (helper_files() if known is None and read is _read else known or ()):
            every.setdefault(other, split_includes(read(f"_{other}")))
        _check_includes(every, includes.helpers, bodies)
    prelude = "\n".join(includes.helpers[h][0] for h in includes.order)
    for needed in ("begin(keys)", "finish(result)"):
        if not re.search(rf"^local function {re.escape(needed)}", prelude, re.MULTILINE):
            raise ValueError(f"the helper files must define `local function {needed}`")
    # The name is a hash of the text, so the text is hashed with a placeholder for it.
    parts = ["#!lua name=@LIB@\n", prelude]
    for op, body, _ in bodies:
        # The body, which returns as a script does, runs in a function of its own, so that
        # finish() sees every return: it writes what the operation kept back until its end.
        parts.append(
            f"\nredis.register_function('@LIB@_{op}', function(KEYS, ARGV)\n"
            f"begin(KEYS)\nreturn finish((function()\n{body.rstrip()}\nend)())\nend)\n"
        )
    template = "".join(parts)
    name = f"{LIBRARY_PREFIX}_{hashlib.sha1(template.encode()).hexdigest()[:8]}"
    return Library(name, template.replace("@LIB@", name),
                   {op: f"{name}_{op}" for op, _, _ in bodies})


def _check_includes(every: dict[str, tuple[str, list[str]]],
                    helpers: dict[str, tuple[str, list[str]]],
                    bodies: list[tuple[str, str, list[str]]]) -> None:
    """Include what you use, and only that: each file (helper or operation) includes every
    helper whose names it uses, and none whose names it does not (`base`, the keys and the
    call's state, is used by nearly all and may be included by any). `every`: all helper
    files (whose names are known), `helpers`: those in the library."""
    owner: dict[str, str] = {}
    for name, (text, _) in every.items():
        for defined in defined_by(text):
            owner.setdefault(defined, name)
    files = [(f"_{n}", t, inc, n) for n, (t, inc) in helpers.items()]
    files += [(op, body, named, "") for op, body, named in bodies]
    for label, text, included, own in files:
        mine = defined_by(text) if own else set()
        uses = {owner[n] for n in used_by(text) - mine if n in owner} - {own}
        given = set(included) | (set(IMPLICIT) if not own else set())
        if missing := uses - given:
            raise ValueError(f"lua/{label}.lua uses {', '.join(sorted(missing))} without "
                             f"including it: add --@include {' '.join(sorted(missing))}")
        if unused := set(included) - uses - {"base"}:
            raise ValueError(f"lua/{label}.lua includes {', '.join(sorted(unused))} but uses "
                             "nothing of it: remove the --@include")


@cache
def library() -> Library:
    """The engine's library, built from lua/ once per process (without the include check,
    which tests/engine/test_functions.py runs on lua/)."""
    return build(check=False)


@cache
def source(name: str) -> str:
    """One operation's text as it goes into the library (its include lines taken out)."""
    return split_includes(_read(name))[0]


def _not_found(exc: redis.ResponseError) -> bool:
    return str(exc).startswith(_NOT_FOUND)


def is_cluster(client: Any) -> bool:
    return hasattr(client, "nodes_manager")


NEEDS_REDIS_7 = (
    "queueadmin needs Redis 7.0 or newer: its engine is a Redis Functions library "
    "(FUNCTION LOAD, FCALL). The server answered: {}"
)


def load(client: Any, lib: Library, node: Any = None) -> None:
    """FUNCTION LOAD REPLACE `lib` (same name, same text: replacing it changes nothing): on
    every reachable primary of a cluster, or only on `node`, the one that answered "not
    found". A server
    without Functions (Redis < 7) is a QueueError saying so."""
    try:
        _load(client, lib, node)
    except redis.ResponseError as exc:
        if "unknown command" in str(exc).lower():
            raise QueueError(NEEDS_REDIS_7.format(exc)) from exc
        raise


def _load(client: Any, lib: Library, node: Any) -> None:
    if not is_cluster(client):
        client.function_load(lib.text, replace=True)
        return
    if node is not None:
        # Only where it was missing: a primary that is down elsewhere must not fail the call.
        client.execute_command("FUNCTION LOAD", "REPLACE", lib.text, target_nodes=node)
        return
    for primary in client.get_primaries():  # at start (prepare()): each shard, if reachable
        try:
            client.execute_command("FUNCTION LOAD", "REPLACE", lib.text, target_nodes=primary)
        except (redis.ConnectionError, redis.TimeoutError):
            continue  # loaded there on its first "Function not found"


def _call_cluster(client: Any, lib: Library, fn: str, keys: Sequence[str], args: Any) -> Any:
    # Routed here from the first key's slot: redis-py would first ask a node for an FCALL's
    # keys (COMMAND GETKEYS, with every argument) at each call. Retried as redis-py retries
    # a command it routes itself, once it has refreshed its slot table.
    attempt, loaded = 0, False
    while True:
        node = None
        try:
            node = client.get_node_from_key(keys[0])
            return client.execute_command("FCALL", fn, len(keys), *keys, *args, target_nodes=node)
        except Exception as exc:
            if not loaded and isinstance(exc, redis.ResponseError) and _not_found(exc):
                load(client, lib, node)
                loaded = True
            elif type(exc) in client.ERRORS_ALLOW_RETRY and attempt < client.retry.get_retries():
                attempt += 1  # ClusterDownError is a ResponseError too: retried, not loaded
            else:
                raise


def call(client: Any, lib: Library, op: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
    """FCALL the operation `op` of `lib`, loading the library first if Redis lacks it."""
    fn = lib.functions[op]
    if is_cluster(client):
        return _call_cluster(client, lib, fn, keys, args)
    try:
        return client.execute_command("FCALL", fn, len(keys), *keys, *args)
    except redis.ResponseError as exc:
        if "unknown command" in str(exc).lower():
            raise QueueError(NEEDS_REDIS_7.format(exc)) from exc
        if not _not_found(exc):
            raise
    load(client, lib)
    return client.execute_command("FCALL", fn, len(keys), *keys, *args)

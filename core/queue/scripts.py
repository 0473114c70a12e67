"""The engine's Lua operations as one Redis Functions library, and the calls into it.

Each operation stays one file, lua/<name>.lua: a contract header, then a body that reads
`KEYS` and `ARGV` and `return`s, as a script would. A `--@include NAME` line in it names a
helper file, lua/_NAME.lua, or a group of them (HELPERS: `common` is the engine's helpers,
one file per concern, in the order they build on each other). The library is
`#!lua name=<lib>`, every included helper file once, then one
`redis.register_function('<lib>_<name>', function(KEYS, ARGV) ... end)` per operation around
its body. Redis runs the helpers once, when it loads the library, instead
of at every call as it would a script's (~15 us a call); `begin(KEYS)`, which the helpers
must define, is called first in every operation to set the queue's keys and reset the state
of one call, and `finish(result)` last, with the operation's result, to write what the
operation kept back until its end (request fields, stats) before it is returned.

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

_INCLUDE = re.compile(r"^--@include (\w+)[ \t]*\n?", re.MULTILINE)
# Groups of helper files an operation includes by one name, in the order they are loaded: a
# file uses only what the files before it define (each one's header says what it defines).
HELPERS = {
    "common": ("base", "requests", "metrics", "readiness", "finish", "leasing", "completion",
               "tasks", "scheduled", "revoke"),
}
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
)


def _read(name: str) -> str:
    return files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def split_includes(text: str) -> tuple[str, list[str]]:
    """An operation's text without its `--@include NAME` lines, and the names they include."""
    return _INCLUDE.sub("", text), _INCLUDE.findall(text)


@dataclass(frozen=True)
class Library:
    """A built library: its versioned name and the text FUNCTION LOAD takes."""

    name: str
    text: str
    functions: dict[str, str] = field(compare=False)  # operation -> registered function name


def build(names: Sequence[str] = SCRIPT_NAMES, read: Callable[[str], str] = _read) -> Library:
    """The library of the operations `names`: their helper files once, then each operation
    as a registered function. Raises LookupError for a missing helper file, ValueError for
    a helper that includes another or that does not define begin()."""
    helpers: dict[str, str] = {}
    bodies: list[tuple[str, str]] = []
    for op in names:
        body, named = split_includes(read(op))
        includes = [f for name in named for f in HELPERS.get(name, (name,))]
        for inc in includes:
            if inc in helpers:
                continue
            try:
                text = read(f"_{inc}")
            except FileNotFoundError as exc:
                raise LookupError(f"--@include {inc} in {op}.lua: no file lua/_{inc}.lua") from exc
            if _INCLUDE.search(text):
                raise ValueError(f"lua/_{inc}.lua includes another file; one level only")
            helpers[inc] = text
        bodies.append((op, body))
    prelude = "\n".join(helpers.values())
    for helper in ("begin(keys)", "finish(result)"):
        if not re.search(rf"^local function {re.escape(helper)}", prelude, re.MULTILINE):
            raise ValueError(f"the helper files must define `local function {helper}`")
    # The name is a hash of the text, so the text is hashed with a placeholder for it.
    parts = ["#!lua name=@LIB@\n", prelude]
    for op, body in bodies:
        # The body, which returns as a script does, runs in a function of its own, so that
        # finish() sees every return: it writes what the operation kept back until its end.
        parts.append(
            f"\nredis.register_function('@LIB@_{op}', function(KEYS, ARGV)\n"
            f"begin(KEYS)\nreturn finish((function()\n{body.rstrip()}\nend)())\nend)\n"
        )
    template = "".join(parts)
    name = f"{LIBRARY_PREFIX}_{hashlib.sha1(template.encode()).hexdigest()[:8]}"
    return Library(name, template.replace("@LIB@", name), {op: f"{name}_{op}" for op, _ in bodies})


@cache
def library() -> Library:
    """The engine's library, built from lua/ once per process."""
    return build()


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

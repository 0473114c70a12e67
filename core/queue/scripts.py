"""Loads the Lua scripts in lua/, expanding `--@include NAME` lines with lua/_NAME.lua."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from typing import Any

_INCLUDE = re.compile(r"^--@include (\w+)\s*$", re.MULTILINE)

SCRIPT_NAMES = (
    "submit",
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
)


def _read(name: str) -> str:
    return files(__package__).joinpath("lua", f"{name}.lua").read_text(encoding="utf-8")


def expand(source: str, read: Any = _read) -> str:
    """Replace each `--@include NAME` line with the text of `_NAME.lua` (one level deep)."""

    def include(m: re.Match[str]) -> str:
        try:
            body: str = read(f"_{m.group(1)}")
        except FileNotFoundError as exc:
            raise LookupError(f"--@include {m.group(1)}: no file lua/_{m.group(1)}.lua") from exc
        if _INCLUDE.search(body):
            raise ValueError(f"lua/_{m.group(1)}.lua includes another file; one level only")
        return body

    return _INCLUDE.sub(include, source)


@cache
def source(name: str) -> str:
    """The full text of one script, includes expanded."""
    return expand(_read(name))

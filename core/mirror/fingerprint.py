"""Error fingerprints: dead letters that failed the same way get the same one, whatever ids,
numbers or values their messages carry, so they group with indexed SQL.

The worker writes a task's error as "ExcClass: message"; the fingerprint is the sha1 of the
handler, the exception class and the message with its variable parts masked (`pattern`).
"""

from __future__ import annotations

import hashlib
import re
from typing import NamedTuple

PATTERN_MAX = 1000  # characters of masked message kept (and hashed)

# "ExcClass: message", "module.ExcClass: message", or a bare "ExcClass".
_HEAD = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)(?::\s*|$)")
# In masking order: quoted values first (so what they hold is one value), then UUIDs, hex ids
# (0x..., or 4+ hex digits mixing digits and letters: a worker name's random tail, a sha) and
# numbers. A quote opens only where a
# word does not go on (the apostrophe of "can't" is not one); numbers only where they do not
# end a word (utf8, sha1, s3 stay; chunk_17 and 17ms do not).
_MASKS = [
    (re.compile(r"(?<![\w'])'[^'\n]*'(?!\w)"), "'<str>'"),
    (re.compile(r'(?<![\w"])"[^"\n]*"(?!\w)'), '"<str>"'),
    (re.compile(r"`[^`\n]*`"), "`<str>`"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
     "<uuid>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.I), "<hex>"),
    (re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{4,}\b", re.I), "<hex>"),
    (re.compile(r"(?<![A-Za-z0-9.])[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?", re.I), "<n>"),
]


class Fingerprint(NamedTuple):
    exception: str  # the class name as written, "" when the error names none
    pattern: str  # the message, masked
    fingerprint: str  # sha1 hex of handler, exception and pattern


def split_error(error: str) -> tuple[str, str]:
    """("ExcClass", "message") from the worker's "ExcClass: message" (or a bare "ExcClass");
    ("", error) when the text does not start with something named like an exception class."""
    m = _HEAD.match(error)
    if m is None or not _looks_like_class(m.group(1)):
        return "", error
    return m.group(1), error[m.end() :]


def _looks_like_class(name: str) -> bool:
    last = name.rsplit(".", 1)[-1]
    return last[:1].isupper() or last.endswith(("Error", "Exception", "Exit", "Interrupt"))


def mask(message: str) -> str:
    """The message with quoted values, UUIDs, hex ids and numbers replaced by placeholders,
    whitespace runs made one space, cut at PATTERN_MAX characters."""
    out = message
    for regex, placeholder in _MASKS:
        out = regex.sub(placeholder, out)
    return " ".join(out.split())[:PATTERN_MAX]


def fingerprint(handler: str, error: str) -> Fingerprint:
    """The fingerprint of one dead letter's error under its handler."""
    exception, message = split_error(error)
    pattern = mask(message)
    digest = hashlib.sha1(f"{handler}\n{exception}\n{pattern}".encode(), usedforsecurity=False)
    return Fingerprint(exception, pattern, digest.hexdigest())

"""Unique, deduplicated and debounced submits (issue 37): a request may name a `unique_key`;
while another request holds that key (within its scope), a second submit creates nothing and
says which request holds it, decided in the same atomic call as the submit (submit.lua,
submit_flow.lua): 50 producers submitting one key at once leave one request.

The scope: "waiting" (the key is held until the request's first task starts), "active"
(until the request completes, the default) or "done+<duration>" (until that long after it
completes done; a failed or cancelled request lets go at once). What a second submit does
(`on_duplicate`): "return" the existing request; "replace" its tasks while none has started
(else as return); "delay" a scheduled request's due time to the new submit's (debounce; else
as return). The key lives in `uniq:<key>` (its holder's id); the request keeps it in `uk`.
"""

from __future__ import annotations

import re
from datetime import timedelta

from .errors import InvalidInput

SCOPES = ("waiting", "active", "done")
ON_DUPLICATE = ("return", "replace", "delay")
_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.@=+:/-]{0,199}")
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
MAX_KEEP_MS = 30 * 86_400_000


def duration_ms(text: str) -> int:
    """"90s", "30m", "1h30m", "7d" in ms; InvalidInput otherwise."""
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise InvalidInput(f"not a duration: {text!r} (say 90s, 30m, 12h or 7d)")
    return sum(int(n) * _UNITS_MS[u] for n, u in parts)


def unique_spec(key: str | None, scope: str = "active", on_duplicate: str = "return") -> str:
    """What the submit scripts take: "" without a key, else "<scope>|<on_dup>|<keep ms>|<key>"."""
    if key is None:
        return ""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise InvalidInput(
            f"invalid unique key {key!r}: 1-200 characters from A-Z a-z 0-9 and _ . @ = + : / -, "
            "starting with a letter or digit")
    kind, plus, keep = scope.partition("+")
    if kind not in SCOPES or (kind == "done") != bool(plus):
        raise InvalidInput(f"unique scope {scope!r}: waiting, active or done+DURATION "
                           "(e.g. done+1h)")
    keep_ms = duration_ms(keep) if plus else 0
    if keep_ms > MAX_KEEP_MS:
        raise InvalidInput(f"unique scope {scope!r}: done+ at most {MAX_KEEP_MS // 86_400_000}d")
    if on_duplicate not in ON_DUPLICATE:
        raise InvalidInput(f"on_duplicate {on_duplicate!r}: one of {', '.join(ON_DUPLICATE)}")
    return f"{kind}|{on_duplicate}|{keep_ms}|{key}"


def scope_text(kind: str, keep_ms: int) -> str:
    """A scope as the API takes it back ("done+3600s" for a kept one)."""
    return f"done+{timedelta(milliseconds=keep_ms).total_seconds():g}s" if kind == "done" else kind

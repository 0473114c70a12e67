"""The producer's trace context (issue 38), as the engine keeps it: an opaque W3C
`traceparent` stored with the request by its submit, in the same call, and handed to the
workers with its leases. The engine never imports OpenTelemetry: core.tracing, when tracing is
on, sets SENDING here, and a submit given no traceparent of its own asks it for one."""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Protocol

from .errors import InvalidInput

# Version 00 of https://www.w3.org/TR/trace-context/#traceparent-header, lower-case hex.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16


class Sending(Protocol):
    """A submit being traced: its span's context to keep, and what it made."""

    traceparent: str

    def sent(self, request_id: str, tasks: int) -> None: ...


# Set by core.tracing while tracing is on: SENDING(queue name) starts the span of one submit
# ("send <queue>", a child of the caller's current span) around the engine's call.
SENDING: Callable[[str], AbstractContextManager[Sending]] | None = None


def parse_traceparent(text: object) -> tuple[str, str] | None:
    """(trace id, parent span id) of a valid version-00 traceparent, else None."""
    if not isinstance(text, str) or len(text) != 55:
        return None
    m = _TRACEPARENT.fullmatch(text)
    if m is None or m[1] == _ZERO_TRACE or m[2] == _ZERO_SPAN:
        return None
    return m[1], m[2]


def check_traceparent(text: object) -> str:
    """`text` if it is a valid W3C traceparent (version 00) or "" (none); else InvalidInput."""
    if text == "":
        return ""
    if parse_traceparent(text) is None:
        raise InvalidInput(
            f"traceparent must be a W3C trace context, version 00 (00-<32 hex>-<16 hex>-<2 hex>, "
            f"lower case, ids not all zeros), got {str(text)[:80]!r}")
    return str(text)


def trace_id_of(traceparent: str) -> str:
    """The trace id (32 hex digits) of a stored traceparent, "" if it has none."""
    ids = parse_traceparent(traceparent)
    return ids[0] if ids else ""

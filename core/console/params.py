"""Query parameters, checked: anything malformed is a 400 page that says what was wrong."""

from __future__ import annotations

import datetime as dt

from django.core.exceptions import BadRequest
from django.http import QueryDict


class BadParam(BadRequest):
    """A query parameter the page cannot use; its message is shown on the 400 page."""


def choice(q: QueryDict, name: str, choices: tuple[str, ...] | list[str]) -> str | None:
    value = q.get(name) or None
    if value is not None and value not in choices:
        raise BadParam(f"{name} must be one of {', '.join(choices)}, not {value!r}.")
    return value


def integer(q: QueryDict, name: str, low: int, high: int) -> int | None:
    value = q.get(name, "").strip()
    if not value:
        return None
    if not value.lstrip("-").isdecimal() or not low <= int(value) <= high:
        raise BadParam(f"{name} must be a whole number from {low} to {high}, not {value!r}.")
    return int(value)


def text(q: QueryDict, name: str, max_length: int = 200) -> str | None:
    value = q.get(name, "").strip()
    if len(value) > max_length:
        raise BadParam(f"{name} is longer than {max_length} characters.")
    return value or None


def when(q: QueryDict, name: str) -> dt.datetime | None:
    """An ISO date or date-time (UTC unless it says otherwise)."""
    value = q.get(name, "").strip()
    if not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise BadParam(
            f"{name} must be a date or time such as 2026-11-23 or 2026-11-23T14:05, "
            f"not {value!r}."
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)

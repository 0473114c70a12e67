"""Query parameters, checked: anything malformed is a 400 page that says what was wrong."""

from __future__ import annotations

import datetime as dt
import re

from django.core.exceptions import BadRequest
from django.http import QueryDict

from core.console.errors import ConsoleError

# ASCII digits only, few enough for int(): "--5", a fullwidth digit or 5,000 digits are not
# numbers a page asks for.
_INTEGER = re.compile(r"-?[0-9]{1,18}")


class BadParam(ConsoleError, BadRequest):
    """A query parameter the page cannot use; its message is shown on the 400 page."""


def choice(q: QueryDict, name: str, choices: tuple[str, ...] | list[str]) -> str | None:
    value = q.get(name) or None
    if value is not None and value not in choices:
        raise BadParam(f"{name} must be one of {', '.join(choices)}, not {value[:100]!r}.")
    return value


def integer(q: QueryDict, name: str, low: int, high: int) -> int | None:
    value = q.get(name, "").strip()
    if not value:
        return None
    if not _INTEGER.fullmatch(value) or not low <= int(value) <= high:
        raise BadParam(f"{name} must be a whole number from {low} to {high}, not "
                       f"{value[:100]!r}.")
    return int(value)


def text(q: QueryDict, name: str, max_length: int = 200) -> str | None:
    value = q.get(name, "").strip()
    if len(value) > max_length:
        raise BadParam(f"{name} is longer than {max_length} characters.")
    if "\0" in value:  # PostgreSQL cannot hold one in a string, so no row has one
        raise BadParam(f"{name} cannot hold a NUL character.")
    return value or None


def when(q: QueryDict, name: str) -> dt.datetime | None:
    """An ISO date or date-time (UTC unless it says otherwise), in UTC."""
    value = q.get(name, "").strip()
    if not value:
        return None
    parsed = iso_time(value)
    if parsed is None:
        raise BadParam(
            f"{name} must be a date or time such as 2026-11-23 or 2026-11-23T14:05, "
            f"between the years 1 and 9999 in UTC, not {value[:100]!r}."
        )
    return parsed


def iso_time(value: str) -> dt.datetime | None:
    """`value` (ISO 8601, UTC unless it says otherwise) as a UTC time, or None if it is not
    one or its UTC time falls outside the calendar Python and the database hold: an offset
    can move 9999-12-31T23:59-23:59 into the year 10000."""
    try:
        parsed = dt.datetime.fromisoformat(value.strip())
        return parsed.astimezone(dt.UTC) if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    except (ValueError, OverflowError):
        return None

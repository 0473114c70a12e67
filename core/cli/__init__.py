"""What the management commands do, as plain functions that tests call directly.

Every failure a person can cause or fix leaves as a CommandError with a message saying what
to do; engine and Redis errors are translated here, in one place.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO, cast

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

from core.conf import redacted
from core.queue import InvalidInput, QueueError, RedisUnavailable, UnknownRequest


def unreachable_message(url: str) -> str:
    return (
        f"cannot reach Redis at {redacted(url)}. Start the stack with `make run` (it starts "
        f"the project's own redis-server on port {settings.EMBEDDED_REDIS_PORT}), or set "
        "REDIS_URL to a Redis that runs."
    )


@contextmanager
def command_errors(action: str) -> Iterator[None]:
    """Turn engine and configuration errors raised inside into CommandErrors."""
    try:
        yield
    except RedisUnavailable as exc:
        cause = exc.__cause__ or exc
        message = unreachable_message(settings.REDIS_URL)
        raise CommandError(f"{action}: {message} ({cause})") from exc
    except (InvalidInput, UnknownRequest) as exc:
        raise CommandError(f"{action}: {exc}") from exc
    except QueueError as exc:
        raise CommandError(f"{action} failed: {exc}") from exc
    except ImproperlyConfigured as exc:
        raise CommandError(str(exc)) from exc


def raw_stream(stream: Any) -> TextIO:
    """The file under a management command's OutputWrapper: rich writes control sequences and
    partial lines that the wrapper's line-ending logic would mangle."""
    return cast(TextIO, getattr(stream, "_out", stream))

"""What the management commands do, as plain functions that tests call directly.

Every failure a person can cause or fix leaves as a CommandError with a message saying what
to do; engine and Redis errors are translated here, in one place.
"""

from __future__ import annotations

from argparse import ArgumentParser
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO, cast

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import CommandError

from core.conf import redacted
from core.queue import InvalidInput, QueueadminError, QueueError, RedisUnavailable, UnknownRequest

if TYPE_CHECKING:
    from core.ops.audit import Actor


class CliError(QueueadminError):
    """Root of the commands' own refusals (what the engine or the service layer refuse keeps
    its own class); every one leaves a command as a CommandError with its message."""


def unreachable_message(url: str) -> str:
    return (
        f"cannot reach Redis at {redacted(url)}. Start the stack with `make run` (it starts "
        f"the project's own redis-server on port {settings.EMBEDDED_REDIS_PORT}); a stack "
        "started with QA_REDIS_PORT=N needs the same QA_REDIS_PORT here; or set REDIS_URL to "
        "a Redis that runs."
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


def add_actor_option(parser: ArgumentParser) -> None:
    """`--as NAME`, for every command that changes state."""
    parser.add_argument(
        "--as", dest="as_user", metavar="NAME",
        help="act as the console user NAME, with its permissions, and audit it so (default: "
             "the OS user, who may do everything)")


def actor_option(name: str | None) -> Actor:
    """The actor a command's `--as` names (the OS user without it); CommandError (exit 2) if
    there is no such console user."""
    from core.ops.audit import cli_actor
    from core.ops.errors import BadInput

    try:
        return cli_actor(name)
    except BadInput as exc:
        raise CommandError(str(exc), returncode=2) from exc


def raw_stream(stream: Any) -> TextIO:
    """The file under a management command's OutputWrapper: rich writes control sequences and
    partial lines that the wrapper's line-ending logic would mangle."""
    return cast(TextIO, getattr(stream, "_out", stream))

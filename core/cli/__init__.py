"""What the management commands do, as plain functions that tests call directly.

Every failure a person can cause or fix leaves as a CommandError with a message saying what
to do; engine and Redis errors are translated here, in one place. Exit statuses
(docs/operations.md): 2 for bad input (an argument, an option or a setting that is not valid,
an unknown queue, request or handler: nothing was done, and the same command fails the same
way again), 1 for anything else that stopped it (Redis down, a refusal, a request that ended
failed, a timeout).

Imports little: every command imports this module, and a command answers at once
(tests/ops/test_cli_startup.py).
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
from core.queue import InvalidInput, QueueadminError, QueueError, RedisUnavailable

if TYPE_CHECKING:
    from core.ops.audit import Actor
    from core.queue import Queue


BAD_INPUT = 2  # a command's exit status for bad input; anything else that stops it: 1


class CliError(QueueadminError):
    """Root of the commands' own refusals (what the engine or the service layer refuse keeps
    its own class); every one leaves a command as a CommandError with its message."""


def bad_input(message: str) -> CommandError:
    """The CommandError for input that is not valid: the command exits 2, having done
    nothing."""
    return CommandError(message, returncode=BAD_INPUT)


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
    except (InvalidInput, LookupError) as exc:  # not valid, or names nothing there is
        if not isinstance(exc, QueueError):
            raise
        raise bad_input(f"{action}: {exc}") from exc
    except QueueError as exc:
        raise CommandError(f"{action} failed: {exc}") from exc
    except ImproperlyConfigured as exc:  # a setting that is not valid (REDIS_URL)
        raise bad_input(str(exc)) from exc


def warn_if_paused(q: Queue, what: str, stderr: TextIO) -> bool:
    """Say on `stderr` that `what`, just accepted into `q`, waits while `q` is paused, and how
    to resume it; whether it is."""
    if not q.paused():
        return False
    say_paused(q.name, what, stderr)
    return True


def say_paused(queue: str, what: str, stderr: TextIO) -> None:
    """Say on `stderr` that `what`, just accepted into the paused `queue`, waits, and how to
    resume it."""
    stderr.write(
        f"warning: queue {queue} is paused: {what} is accepted, but no worker takes its tasks "
        f"until the queue is resumed (`manage.py resume --queue {queue}`, or Resume on the "
        "console's overview)\n"
    )
    stderr.flush()


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
        raise bad_input(str(exc)) from exc


def raw_stream(stream: Any) -> TextIO:
    """The file under a management command's OutputWrapper: rich writes control sequences and
    partial lines that the wrapper's line-ending logic would mangle."""
    return cast(TextIO, getattr(stream, "_out", stream))

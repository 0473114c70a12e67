"""`manage.py submit`: read tasks, submit one request, optionally wait for it with a progress
bar driven by the request's counters."""

from __future__ import annotations

import json
import math
import os
import sys
import time
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TextIO

from django.core.management.base import CommandError

from core import tracing
from core.cli import CliError, bad_input, command_errors, warn_if_paused
from core.cli.due import Due, describe
from core.conf import get_queue
from core.queue import PayloadTooLarge, Queue, handlers
from core.queue.errors import InvalidPayload, UnknownHandlerWarning
from core.queue.models import TERMINAL_STATES, RequestInfo, Submitted

# rich (the progress bar) and the engine's introspection are imported by --wait, which alone
# needs them: a plain submit answers sooner (tests/ops/test_cli_startup.py).

POLL_S = 0.2
JSON_OPENERS = ("{", "[", '"')

# Where a task came from ("argument 2", "tasks.jsonl line 7"), so errors can point at it.
Sourced = tuple[str, Any]


class Unique(NamedTuple):
    """--unique-key, --unique-scope, --on-duplicate, as Queue.submit takes them."""

    unique_key: str
    unique_scope: str = "active"
    on_duplicate: str = "return"


@dataclass(frozen=True)
class SubmitOutcome:
    request_id: str
    created: bool
    total: int
    state: str  # after submit, or the final state when waited for


class NotJSON(CliError, ValueError):
    """Python's json module takes NaN, Infinity and numbers too large for a float (1e999,
    read as Infinity); JSON has none of them, and the engine would send them as null."""


def _constant(name: str) -> Any:
    raise NotJSON(f"{name} is not JSON")


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJSON(f"{text} is too large for a JSON number")
    return value


def loads(text: str) -> Any:
    """json.loads, strict: NaN, Infinity and overflowing numbers raise NotJSON."""
    return json.loads(text, parse_constant=_constant, parse_float=_float)


def parse_argument(position: int, text: str) -> Any:
    """A task given on the command line: JSON if it parses, else the text as a JSON string.

    Text that starts like JSON (an object, array or string) but does not parse is an error
    rather than a string, since it is almost certainly a typo; so is NaN or Infinity, which
    would otherwise arrive as null."""
    try:
        return loads(text)
    except NotJSON as exc:
        raise bad_input(
            f"argument {position}: {exc} (JSON has no NaN or Infinity); quote it to send "
            f"the text: '\"{_clip(text)}\"'"
        ) from exc
    except json.JSONDecodeError as exc:
        if text.lstrip().startswith(JSON_OPENERS):
            raise bad_input(
                f"argument {position} is not valid JSON ({exc.msg} at column {exc.colno}): "
                f"{_clip(text)}"
            ) from exc
        return text


def read_jsonl(path: str, *, stdin: TextIO | None = None) -> list[Sourced]:
    """Tasks from a JSON-lines file, one JSON value per line ("-" reads standard input).
    Blank lines are skipped."""
    if path == "-":
        stream = stdin or sys.stdin
        # Bytes where there are any, so a bad byte is reported on its own line.
        return _parse_lines(getattr(stream, "buffer", stream), "standard input")
    try:
        with open(path, "rb") as f:
            return _parse_lines(f, path)
    except OSError as exc:
        raise bad_input(f"cannot read task file {path}: {exc.strerror or exc}") from exc


def _parse_lines(lines: Iterable[str | bytes], label: str) -> list[Sourced]:
    out: list[Sourced] = []
    for number, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as exc:
            raise bad_input(f"{label}, line {number}: not UTF-8 text ({exc.reason})") from exc
        if not line.strip():
            continue
        try:
            out.append((f"{label} line {number}", loads(line)))
        except NotJSON as exc:
            raise bad_input(
                f"{label}, line {number}: {exc} (JSON has no NaN or Infinity)"
            ) from exc
        except json.JSONDecodeError as exc:
            raise bad_input(
                f"{label}, line {number}: not valid JSON ({exc.msg} at column {exc.colno}); "
                "each line must hold one JSON value"
            ) from exc
    return out


def read_tasks(
    task_args: Sequence[str] = (), file: str | None = None, *, stdin: TextIO | None = None
) -> list[Sourced]:
    """Tasks from command-line arguments, then from the JSON-lines `file`, in that order."""
    tasks = [(f"argument {i}", parse_argument(i, a)) for i, a in enumerate(task_args, 1)]
    if file is not None:
        tasks += read_jsonl(file, stdin=stdin)
    return tasks


def submit(
    task_args: Sequence[str] = (),
    *,
    file: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    concurrency: int | None = None,
    tenant: str | None = None,
    handler: str | None = None,
    any_handler: bool = False,
    max_attempts: int | None = None,
    request_id: str | None = None,
    wait: bool = False,
    timeout: float | None = None,
    print_results: bool = False,
    due: Due | None = None,
    resources: Sequence[str] = (),
    unique: Unique | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> SubmitOutcome:
    """Submit one request; print its id on `stdout`. With `wait`, follow it to the end and
    raise CommandError unless it ends done; with `print_results` too, first print its
    tasks' results on `stdout`, one JSON line each: {"task": ID, "result": VALUE}, in task
    order (those of a request that did not end done as well). Options left None take the
    engine's defaults.

    `handler` must name a handler that a worker of the queue has announced, unless
    `any_handler` (for a producer that starts before its workers). With `due` the request
    is delayed (scheduled) until then. `resources`: the named resources its tasks use (the
    limits on them apply). With `unique` (its key, scope and what a duplicate does), a submit
    while another request holds the key creates nothing: the holder's id is printed, and
    stderr says so."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    _check_wait_options(wait, timeout, print_results)
    sourced = read_tasks(task_args, file, stdin=stdin)
    if not sourced:
        raise bad_input(
            "nothing to submit: give tasks as JSON arguments, or --file FILE.jsonl (- for stdin)"
        )
    options: dict[str, Any] = {
        k: v
        for k, v in {
            "priority": priority, "concurrency": concurrency, "tenant": tenant,
            "max_attempts": max_attempts, "resources": list(resources) or None,
        }.items()
        if v is not None
    }
    with command_errors("submit"):
        q = get_queue(queue)
        handler = check_handler(q, handler, any_handler=any_handler)
        sub = _submitted(q, sourced, handler, request_id, due, options, unique)
    _say_submitted(q, sub, due, stdout, stderr, unique if request_id != sub.request_id else None)
    if not wait:
        return SubmitOutcome(sub.request_id, sub.created, sub.total, sub.state)
    return _followed(q, sub, timeout, print_results, stdout, stderr)


def _followed(q: Queue, sub: Submitted, timeout: float | None, print_results: bool,
              stdout: TextIO, stderr: TextIO) -> SubmitOutcome:
    """--wait: the request followed to its end (its results printed first, if asked);
    CommandError unless it ends done."""
    with command_errors("wait"):
        info = wait_for(q, sub.request_id, timeout=timeout, stderr=stderr)
    if print_results:
        with command_errors("results"):
            results = q.result(sub.request_id)
        write_results(results, stdout)
    if info.state != "done":
        raise CommandError(
            f"request {info.id} ended {info.state}: {info.done} of {info.total} tasks done, "
            f"{info.dead} dead-lettered, {info.cancelled} cancelled"
        )
    return SubmitOutcome(sub.request_id, sub.created, sub.total, info.state)


def _check_wait_options(wait: bool, timeout: float | None, print_results: bool) -> None:
    """--timeout and --print-results apply only with --wait (refused before anything)."""
    if timeout is not None and not wait:
        raise bad_input("--timeout applies only with --wait")
    if print_results and not wait:
        raise bad_input("--print-results applies only with --wait")
    if timeout is not None and timeout <= 0:
        raise bad_input(f"--timeout must be a positive number of seconds, got {timeout}")


def _submitted(q: Queue, sourced: list[Sourced], handler: str, request_id: str | None,
               due: Due | None, options: dict[str, Any], unique: Unique | None) -> Submitted:
    """The request submitted; a task the engine refuses is named by where it came from."""
    try:
        with warnings.catch_warnings():
            # Checked already, or deliberately overridden: the engine's warning adds nothing.
            warnings.simplefilter("ignore", UnknownHandlerWarning)
            # TRACEPARENT: a calling program's trace context (OpenTelemetry's environment
            # carrier), kept with the request as the API keeps its header's (issue 38).
            with tracing.incoming(os.environ.get("TRACEPARENT")) as tp:
                return q.submit(
                    [t for _, t in sourced], handler=handler, request_id=request_id,
                    run_at=due.run_at if due else None, delay=due.delay if due else None,
                    traceparent=tp, **(unique._asdict() if unique else {}), **options,
                )
    except PayloadTooLarge as exc:
        raise bad_input(_too_large(exc, sourced, q.max_payload_bytes)) from exc
    except InvalidPayload as exc:
        raise bad_input(_named(exc, sourced)) from exc


def _say_submitted(q: Queue, sub: Submitted, due: Due | None, stdout: TextIO,
                   stderr: TextIO, duplicate_of: Unique | None = None) -> None:
    """The request's id on stdout; on stderr, when it is due, that it existed already (or
    that it holds the unique key: a refused duplicate), or that its queue is paused."""
    stdout.write(f"{sub.request_id}\n")
    stdout.flush()
    if sub.created and due and (line := describe(sub.state, sub.due_ms, due)):
        stderr.write(line + "\n")
    if not sub.created and duplicate_of is not None:
        stderr.write(_duplicate(q, sub, duplicate_of) + "\n")
    elif not sub.created:
        stderr.write(
            f"request {sub.request_id} already exists in queue {q.name} (state {sub.state}, "
            f"{sub.total} tasks); nothing was submitted\n"
        )
    if sub.state not in TERMINAL_STATES:
        with command_errors("submit"):
            warn_if_paused(q, f"request {sub.request_id}", stderr)


def _duplicate(q: Queue, sub: Submitted, unique: Unique) -> str:
    """What stderr says of a refused duplicate."""
    done = {"replace": "; its tasks were replaced by these if none had started",
            "delay": "; its due time was moved to this submit's if that is later"}
    return (f"duplicate: request {sub.request_id} holds unique key {unique.unique_key!r} in "
            f"queue {q.name} (state {sub.state}, {sub.total} tasks); nothing new was submitted"
            f"{done.get(unique.on_duplicate, '')}")


def write_results(results: dict[str, Any], stdout: TextIO) -> None:
    """One JSON line per result, {"task": ID, "result": VALUE}, as `jq` reads them."""
    for tid, value in results.items():
        stdout.write(json.dumps({"task": tid, "result": value}, ensure_ascii=False) + "\n")
    stdout.flush()


def check_handler(q: Queue, handler: str | None, *, any_handler: bool = False) -> str:
    """`handler` if a worker of `q` announced it (or `any_handler`); else a CommandError that
    lists the handlers its workers run."""
    if handler is not None and any_handler:
        return handler
    offered = handlers.known(q)
    if handler is not None and handler in offered:
        return handler
    if offered:
        known = f"its workers run: {', '.join(offered)}"
    else:
        known = "no worker of it has announced any handler yet (is one running?)"
    if handler is None:
        raise bad_input(
            f"give --handler NAME, the handler that runs each task; queue {q.name}: {known}"
        )
    raise bad_input(
        f"no worker of queue {q.name} runs handler {handler!r}; {known}. Start a worker "
        "that registers it (runworker --import MODULE), or pass --any-handler to submit "
        "anyway (the tasks wait until such a worker starts)"
    )


def wait_for(
    q: Queue, request_id: str, *, timeout: float | None = None, stderr: TextIO | None = None
) -> RequestInfo:
    """Poll the request's counters into a progress bar until it finishes; its final info.

    Raises CommandError on timeout or Ctrl-C (the request itself keeps running)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from core.queue import read

    deadline = None if timeout is None else time.monotonic() + timeout
    console = Console(file=stderr or sys.stderr)
    columns = (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"), TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task(request_id, total=None, detail="")
            while True:
                info = read.request(q, request_id)
                if info is None:
                    raise CommandError(
                        f"request {request_id} is gone from queue {q.name} (expired?)"
                    )
                progress.update(
                    bar, total=info.total or None,
                    completed=info.done + info.dead + info.cancelled,
                    detail=f"{info.state} · leased {info.leased} · delayed {info.delayed} · "
                    f"dead {info.dead}",
                )
                if info.finished:
                    return info
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise CommandError(
                        f"timed out after {timeout:g}s waiting for request {request_id} "
                        f"({info.state}, {info.done + info.dead + info.cancelled} of "
                        f"{info.total} tasks finished); it keeps running in queue {q.name}"
                    )
                time.sleep(POLL_S if left is None else min(POLL_S, left))
    except KeyboardInterrupt:
        raise CommandError(
            f"stopped waiting; request {request_id} keeps running in queue {q.name}"
        ) from None


def _too_large(exc: PayloadTooLarge, sourced: list[Sourced], limit: int) -> str:
    if not 0 <= exc.index < len(sourced):
        return f"submit: {exc}"
    return (
        f"{sourced[exc.index][0]}: the task is {exc.size} bytes; a task may hold at most "
        f"{limit}. Put the data somewhere shared (a file, an object store) and submit a "
        "reference."
    )


def _named(exc: InvalidPayload, sourced: list[Sourced]) -> str:
    if not 0 <= exc.index < len(sourced):
        return f"submit: {exc}"
    detail = str(exc).removeprefix(f"task {exc.index} ")
    return f"{sourced[exc.index][0]}: the task {detail}"


def _clip(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def unique_from(key: str | None, scope: str | None, on_duplicate: str | None) -> Unique | None:
    """--unique-key and its options as a Unique; CommandError (exit 2) for a scope or an
    on-duplicate without a key."""
    if key is None:
        if scope is not None or on_duplicate is not None:
            raise bad_input("--unique-scope and --on-duplicate go with --unique-key K")
        return None
    return Unique(key, scope or "active", on_duplicate or "return")

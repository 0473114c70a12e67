"""The operator actions at the command line (`manage.py requeue`, `cancel`, `claim`, `release`,
`pause`, `resume`): the same service layer as the console, with the OS user as the actor
("os:<login>", source "cli"). Each run is one audit entry, a --dry-run too (it says so in
its target); a dry run prints the exact count the action would act on now and changes
nothing in the queue. Bad input leaves as a CommandError with exit status 2."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TextIO

from django.core.management.base import CommandError

from core.ops import actions, audit, bulk
from core.ops.actions import PendingRef, Result
from core.ops.audit import Actor, os_actor
from core.ops.errors import BadInput, NotFound, OpsError
from core.ops.runner import RunnerState, step
from core.queue import InvalidInput, Queue, read
from core.queue.keys import validate_task_id

from . import command_errors

BAD_INPUT = 2


@contextmanager
def ops_errors(action: str) -> Iterator[None]:
    """Service-layer refusals as CommandErrors: bad input exits 2, the rest 1."""
    with command_errors(action):
        try:
            yield
        except (BadInput, InvalidInput) as exc:
            raise CommandError(f"{action}: {exc}", returncode=BAD_INPUT) from exc
        except OpsError as exc:
            raise CommandError(f"{action}: nothing done: {exc}") from exc


def _dry(actor: Actor, action: str, queue: str, target: str, count: int, out: TextIO,
         what: str) -> int:
    audit.record(actor, action, queue, target=f"dry run: {target}", count=count)
    out.write(f"dry run: would {action} {count:,} {what} in queue {queue}; nothing done\n")
    return count


def _done(result: Result, out: TextIO) -> Result:
    out.write(result.message + "\n")
    for note in result.notes:
        out.write(note + "\n")
    return result


def _still_dead(q: Queue, ids: list[str]) -> int:
    return len(read.dead_letters_present(q, ids))


def requeue(
    *,
    queue: str,
    out: TextIO,
    ids: Sequence[str] = (),
    request: str | None = None,
    fingerprint: str | None = None,
    handler: str | None = None,
    since: str | None = None,
    dry_run: bool = False,
    actor: Actor | None = None,
) -> int:
    """Requeue dead letters by id, of one request, or of a fingerprint group or handler (the
    mirror's table, as the console's bulk requeue: exactly the letters it holds now, in
    chunks). Returns how many were (or, dry, would be) requeued."""
    actor = actor or os_actor()
    with ops_errors("requeue"):
        chosen = [x for x in (bool(ids), request is not None,
                              fingerprint is not None or handler is not None) if x]
        if len(chosen) != 1:
            raise BadInput("give one of --id, --request, or --fingerprint/--handler")
        if since and (ids or request):
            raise BadInput("--since goes with --fingerprint or --handler")
        if ids:
            id_list = list(dict.fromkeys(ids))
            if dry_run:
                actions.check_permission(actor, "requeue", queue, audit.describe_ids(id_list),
                                         len(id_list))
                q = actions.open_queue(queue)
                valid = actions._ids(id_list, "dead letter id", validate_task_id)
                return _dry(actor, "requeue", queue, audit.describe_ids(valid),
                            _still_dead(q, valid), out, "dead letters")
            return _done(actions.requeue_dead(actor, queue, id_list), out).acted
        if request is not None:
            if dry_run:
                actions.check_permission(actor, "requeue", queue, f"request {request}", 1)
                q = actions.open_queue(queue)
                rid = actions._ids([request], "request id", actions._request_id)[0]
                info = read.request(q, rid)
                if info is None:
                    raise BadInput(f"there is no request {rid!r} in queue {queue!r}")
                return _dry(actor, "requeue", queue, f"all dead letters of request {rid}",
                            info.dead, out, f"dead letters of request {rid}")
            return _done(actions.requeue_request(actor, queue, request), out).acted
        filters = {k: v for k, v in (("fingerprint", fingerprint), ("handler", handler),
                                     ("since", since)) if v}
        return _filtered(actor, "requeue", queue, filters, dry_run, out)


def _filtered(actor: Actor, action: str, queue: str, filters: dict[str, str], dry_run: bool,
              out: TextIO) -> int:
    """A bulk action run here and now: its snapshot, then chunk after chunk."""
    made = bulk.preview(actor, action, queue, filters, audited=False)  # the run's entry says it
    if dry_run:
        made.status = "stopped"
        made.save(update_fields=["status"])
        return _dry(actor, action, queue, made.description, made.count, out,
                    "dead letters" if action != "cancel" else "requests")
    if made.count == 0:
        made.status = "done"
        made.save(update_fields=["status"])
        out.write(f"{made.description}: nothing to do\n")
        audit.record(actor, action, queue, target=made.description, count=0, bulk=made)
        return 0
    bulk.confirm(actor, made.pk, typed_count=str(made.count))
    made.refresh_from_db()
    state = RunnerState()
    while made.status == "running":
        step(made, state)
        out.write(f"  {made.position:,} of {made.count:,}\n")
    out.write(f"{made.description}: {actions.message(action, made.acted, made.skipped)}\n")
    return int(made.acted)


def cancel(*, queue: str, ids: Sequence[str], out: TextIO, dry_run: bool = False,
           actor: Actor | None = None) -> int:
    """Cancel requests by id (1,000 at most per run)."""
    actor = actor or os_actor()
    with ops_errors("cancel"):
        id_list = list(dict.fromkeys(ids))
        if dry_run:
            actions.check_permission(actor, "cancel", queue, audit.describe_ids(id_list),
                                     len(id_list))
        q = actions.open_queue(queue)
        valid = actions._ids(id_list, "request id", actions._request_id)
        states = read.requests_many(q, valid)
        _say_unknown(q, valid, states, out)
        if dry_run:
            n = sum(1 for info in states.values() if info.state in ("open", "active"))
            return _dry(actor, "cancel", queue, audit.describe_ids(valid), n, out, "requests")
        return _done(actions.cancel(actor, queue, id_list), out).acted


def _say_unknown(q: Queue, ids: list[str], known: Mapping[str, object], out: TextIO) -> None:
    """NotFound (exit 2, nothing done) when the queue holds none of `ids`; else a line naming
    those it does not hold (skipped by the action)."""
    unknown = [i for i in ids if i not in known]
    if unknown and len(unknown) == len(ids):
        raise NotFound(f"there is no request {', '.join(map(repr, unknown[:5]))} in queue "
                       f"{q.name!r} (never submitted, or past its retention)")
    if unknown:
        out.write(f"not in queue {q.name} (never submitted, or past its retention), skipped: "
                  f"{', '.join(unknown[:20])}{' ...' if len(unknown) > 20 else ''}\n")


def move(*, action: str, queue: str, request: str, tasks: Sequence[str], holder: str,
         to: str | None, min_idle_ms: int, out: TextIO, dry_run: bool = False,
         actor: Actor | None = None) -> int:
    """Claim (to another consumer) or release (back to waiting) pending entries held by
    `holder`; an entry held by someone else, or delivered again within `min_idle_ms`, is
    skipped."""
    actor = actor or os_actor()
    with ops_errors(action):
        refs = [PendingRef(request, t, holder, min_idle_ms) for t in dict.fromkeys(tasks)]
        if action == "claim" and not to:
            raise BadInput("claim needs --to CONSUMER (release puts tasks back to waiting)")
        if dry_run:
            actions.check_permission(actor, action, queue, f"{len(refs)} entries", len(refs))
        refs = actions._refs(refs)
        q = actions.open_queue(queue)
        _say_unknown(q, [request], read.requests_many(q, [request]), out)
        if dry_run:
            held = 0
            for r in refs:
                rows = read.pending(q, r.request_id, after=_before(r.task_id), count=1)
                held += bool(rows and rows[0].task_id == r.task_id
                             and rows[0].consumer == holder and rows[0].idle_ms >= r.idle_ms)
            return _dry(actor, action, queue, f"{len(refs)} entries held by {holder}", held,
                        out, "pending entries")
        if action == "claim":
            assert to is not None
            return _done(actions.claim(actor, queue, refs, to), out).acted
        return _done(actions.release(actor, queue, refs), out).acted


def _before(task_id: str) -> str:
    """The stream id just before `task_id`, so a page after it starts at it."""
    ms, _, seq = task_id.partition("-")
    if seq.isdecimal() and int(seq) > 0:
        return f"{ms}-{int(seq) - 1}"
    return f"{int(ms) - 1}-18446744073709551615" if ms.isdecimal() and int(ms) > 0 else "-"


def switch(*, action: str, queue: str, out: TextIO, dry_run: bool = False,
           actor: Actor | None = None) -> bool:
    """Pause or resume a queue; returns whether it changed."""
    actor = actor or os_actor()
    with ops_errors(action):
        if dry_run:
            actions.check_permission(actor, action, queue, f"queue {queue}", 1)
            q = actions.open_queue(queue)
            would = q.paused() != (action == "pause")
            _dry(actor, action, queue, f"queue {queue}", int(would), out, "queue")
            return False
        fn = actions.pause if action == "pause" else actions.resume
        return bool(_done(fn(actor, queue), out).acted)

"""The operator actions of the console's pages: each a POST with CSRF to /actions/<name>/,
handed to the service layer (core.ops.actions), which checks the permission, acts through the
engine's state-checked Lua and writes the audit entry. The page then goes back where it came
from with the result as a message (a plain form POST and a redirect: no JavaScript needed).

- A refusal of the service layer (no permission) is a 403 page; bad input a 400 page.
- Delete and cancel cannot be undone: their first POST shows a confirmation with the exact
  count, the second acts. A pause asks first too, saying what it stops (how many tasks wait,
  how many running ones finish, the schedules that fire into the paused queue): its button
  is a link, GET /actions/pause/?queue=Q shows the question, and only its POST acts.
- Every form carries a nonce: a second POST of the same form (a double click that reached the
  server after the first finished, a reload of the result) says "already done" instead of
  acting again. Two POSTs at the same instant both reach the engine, which acts once (it
  checks each target's state) and the second says what it skipped.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods

from core.console import forms
from core.console.errors import error_page
from core.console.params import BadParam
from core.console.queues import queue_from
from core.ops import actions, workers
from core.ops.errors import BadInput, Refused, StaleState
from core.ops.perms import allowed
from core.pipeline import jobs
from core.queue import Queue

from .common import PERMISSION, nonce

DONE_KEY = "qa_done"  # session: nonce -> the message of what that form did
DONE_KEPT = 30


# Why targets were skipped, per action: the engine acts only on what is still as the page
# showed it, so a skip means someone (or something) got there first.
SKIPPED = {
    "requeue": "{n} no longer dead: someone else acted first, or the page was out of date",
    "delete": "{n} no longer dead: someone else acted first, or the page was out of date",
    "cancel": "{n} already finished or cancelled",
    "claim": "{n} no longer held by the consumer shown (finished, renewed or moved meanwhile)",
    "release": "{n} no longer held by the consumer shown (finished, renewed or moved meanwhile)",
    "reclaim": "{n} no longer held by the worker",
    "run-now": "{n} no longer scheduled (due already, cancelled or gone)",
}


def explain(result: Any) -> str:
    """The service layer's message, and why anything was skipped."""
    text = str(result.message)
    skipped = int(result.skipped)
    why = SKIPPED.get(str(result.action))
    if skipped and why:
        verb = "was" if skipped == 1 else "were"
        text += f". {why.format(n=f'{skipped:,} {verb}')}."
    for note in getattr(result, "notes", ()):
        if not text.endswith("."):
            text += "."
        text += f" {note[:1].upper()}{note[1:]}."
    return text


SHOWN = 50  # targets a confirmation page lists


@dataclass(frozen=True)
class Confirm:
    """What the confirmation page asks, its button, the targets, and a note under them."""

    question: str
    button: str
    items: list[str]
    note: str = ""
    danger: bool = True  # cannot be undone (a pause can: its items are sentences, not ids)


@dataclass(frozen=True)
class Spec:
    run: Callable[[Any, Queue, HttpRequest], Any]
    perm: str  # the key of core.ops.perms.allowed() that shows its button
    # The question asked before acting: (question, button, targets), or None to act at once.
    confirm: Callable[[HttpRequest, Queue], Confirm] | None = None
    back: str = "core:overview"
    ask_on_get: bool = False  # a GET of its URL shows the question (the button is a link)


def _requeue(actor: Any, q: Queue, request: HttpRequest) -> Any:
    return actions.requeue_dead(actor, q.name, forms.dead_ids(request.POST))


def _delete(actor: Any, q: Queue, request: HttpRequest) -> Any:
    return actions.delete_dead(actor, q.name, forms.dead_ids(request.POST))


def _requeue_request(actor: Any, q: Queue, request: HttpRequest) -> Any:
    return actions.requeue_request(actor, q.name, forms.request_id(request.POST.get("request", "")))


def _cancel(actor: Any, q: Queue, request: HttpRequest) -> Any:
    return actions.cancel(actor, q.name, forms.request_ids(request.POST))


def _refs(entries: list[forms.Entry]) -> list[Any]:
    from core.ops.actions import PendingRef

    return [PendingRef(e.request_id, e.task_id, e.consumer, e.idle_ms) for e in entries]


def _release(actor: Any, q: Queue, request: HttpRequest) -> Any:
    return actions.release(actor, q.name, _refs(forms.entries(request.POST)))


def _claim(actor: Any, q: Queue, request: HttpRequest) -> Any:
    entries = forms.entries(request.POST)
    return actions.claim(actor, q.name, _refs(entries), forms.consumer(request.POST))


def _release_worker(actor: Any, q: Queue, request: HttpRequest) -> Any:
    name = forms.worker(request.POST)
    return actions.release(actor, q.name, _refs(forms.held(request.POST, name)))


def _reclaim(actor: Any, q: Queue, request: HttpRequest) -> Any:
    return actions.reclaim_worker(actor, q.name, forms.worker(request.POST))


def _worker_control(command: str) -> Callable[[Any, Queue, HttpRequest], Any]:
    def run(actor: Any, q: Queue, request: HttpRequest) -> Any:
        return workers.control(actor, command, forms.worker(request.POST), queue=q.name)

    return run


def _confirm_stop(request: HttpRequest, queue: Queue) -> Confirm:
    name = forms.worker(request.POST)
    return Confirm(
        f"Stop worker {name}?",
        f"Stop {name}",
        [name],
        "Within a heartbeat it takes no new task; it finishes the ones it runs (those still "
        "running after its grace time go back to waiting, no attempt spent) and exits. A stop "
        "cannot be undone: under make run the stack does not start it again until the stack "
        "itself is restarted; elsewhere, its supervisor decides (it exits with status 0).",
    )


def _run_now(actor: Any, q: Queue, request: HttpRequest) -> Any:
    return actions.run_now(actor, q.name, forms.request_ids(request.POST))


def _pause(actor: Any, q: Queue, request: HttpRequest) -> Any:
    return actions.pause(actor, q.name)


def _resume(actor: Any, q: Queue, request: HttpRequest) -> Any:
    return actions.resume(actor, q.name)


def _confirm_pause(request: HttpRequest, queue: Queue) -> Confirm:
    i = actions.pause_impact(queue.name)

    def n(count: int, noun: str) -> str:
        return f"{count:,} {noun}{'s' if count != 1 else ''}"

    items = [f"{n(i.waiting, 'waiting task')} stay waiting: no worker takes any of them until "
             "the queue is resumed.",
             f"{n(i.running, 'running task')} finish{'es' if i.running == 1 else ''} on "
             f"{'its' if i.running == 1 else 'their'} worker{'s' if i.running != 1 else ''}; "
             "nothing new starts."]
    if i.retries or i.delayed:
        items.append(f"{n(i.retries, 'task')} in retry backoff and "
                     f"{n(i.delayed, 'delayed request')} come due into the paused queue and "
                     "wait there.")
    for name, next_ms in i.schedules[:SHOWN]:
        when = "" if next_ms is None else " (next at " + timezone.localtime(
            dt.datetime.fromtimestamp(next_ms / 1000, tz=dt.UTC)).strftime(
            "%Y-%m-%d %H:%M %Z") + ")"
        items.append(f"Schedule {name} still fires into the paused queue{when}: its runs wait.")
    if len(i.schedules) > SHOWN:
        items.append(f"… and {n(len(i.schedules) - SHOWN, 'more schedule')} firing into it.")
    note = ("New work submitted meanwhile is accepted and waits too; the console's submit form "
            "and `datajob submit` say so. Resuming loses nothing: the waiting work then runs in "
            "its usual order.")
    if i.paused:
        note = f"Queue {queue.name} is paused already: pausing it again changes nothing. " + note
    return Confirm(f"Pause queue {queue.name}?", f"Pause {queue.name}", items, note,
                   danger=False)


def _confirm_delete(request: HttpRequest, queue: Queue) -> Confirm:
    ids = forms.dead_ids(request.POST)
    what = f"{len(ids):,} dead letter{'s' if len(ids) != 1 else ''}"
    return Confirm(f"Delete {what}? They leave the dead letters for good and count in their "
                   "requests as discarded.", f"Delete {what}", ids)


def _confirm_cancel(request: HttpRequest, queue: Queue) -> Confirm:
    ids = forms.request_ids(request.POST)
    what = f"{len(ids):,} request{'s' if len(ids) != 1 else ''}"
    # The data jobs among the targets shown (one read each): their cancel is the whole job's.
    data = sorted({job for rid in ids[:SHOWN] if (job := jobs.job_of(queue, rid)) is not None})
    note = ""
    if data:
        which = (f"data job {data[0]}" if len(data) == 1
                 else f"data jobs {', '.join(data)}")
        note = (f"This cancels {which} as a whole: its chunks, running or not, and its combine "
                "step; no output is marked complete, and its staging data is removed once its "
                "running chunks have stopped.")
    return Confirm(f"Cancel {what}? No more of their tasks will be delivered, and running ones "
                   "are told to stop. This cannot be undone.", f"Cancel {what}", ids, note)


SPECS: dict[str, Spec] = {
    "requeue": Spec(_requeue, "requeue", back="core:dead"),
    "delete": Spec(_delete, "delete", _confirm_delete, back="core:dead"),
    "requeue-request": Spec(_requeue_request, "requeue", back="core:requests"),
    "cancel": Spec(_cancel, "cancel", _confirm_cancel, back="core:requests"),
    "release": Spec(_release, "claim", back="core:pending"),
    "claim": Spec(_claim, "claim", back="core:pending"),
    "release-worker": Spec(_release_worker, "claim", back="core:workers"),
    "reclaim": Spec(_reclaim, "claim", back="core:workers"),
    "run-now": Spec(_run_now, "cancel", back="core:scheduled"),
    "worker-quiet": Spec(_worker_control("quiet"), "control", back="core:workers"),
    "worker-resume": Spec(_worker_control("resume"), "control", back="core:workers"),
    "worker-stop": Spec(_worker_control("stop"), "control", _confirm_stop, back="core:workers"),
    "pause": Spec(_pause, "pause", _confirm_pause, ask_on_get=True),
    "resume": Spec(_resume, "pause"),
}


def refused(request: HttpRequest, exc: Exception) -> HttpResponse:
    return error_page(request, 403, "Not allowed", str(exc) or "Your account may not do this.")


@require_http_methods(["GET", "HEAD", "POST"])
def act(request: HttpRequest, name: str) -> HttpResponse:
    spec = SPECS.get(name)
    if spec is None:
        return error_page(request, 404, "Not found", f"There is no action {name!r}.")
    if request.method != "POST":
        return _ask(request, name, spec)
    # No permission: the service layer refuses and audits it; junk from such an account is a
    # 403 as well (it learns nothing about what the form should have said).
    may = bool(allowed(request.user).get(spec.perm))
    try:
        queue = queue_from(request, request.POST.get("queue") or None)
        back = forms.next_url(request, f"{reverse(spec.back)}?queue={queue.name}")
        done: dict[str, str] = request.session.get(DONE_KEY, {})
        key = request.POST.get("nonce", "")
        if key and key in done:
            messages.info(request, f"Already done, nothing done again: {done[key]}")
            return HttpResponseRedirect(back)
        # Ask first, unless the service layer is about to refuse (and audit the refusal).
        if spec.confirm is not None and request.POST.get("confirmed") != "1" and may:
            return _confirmation(request, name, queue, spec.confirm(request, queue), back)
        result = spec.run(request.user, queue, request)
    except (BadInput, BadParam) as exc:
        if not may:
            return refused(request, PermissionError(""))
        return error_page(request, 400, "Bad request", str(exc))
    except Refused as exc:
        return refused(request, exc)
    except StaleState as exc:
        messages.warning(request, f"Nothing done: {exc}")
        return HttpResponseRedirect(back)
    text = explain(result)
    (messages.warning if result.skipped else messages.success)(request, text)
    if key:
        done[key] = text
        request.session[DONE_KEY] = dict(list(done.items())[-DONE_KEPT:])
    return HttpResponseRedirect(back)


def _ask(request: HttpRequest, name: str, spec: Spec) -> HttpResponse:
    """GET of an action that asks first (a pause): the question, never the action. Any other
    action's URL answers GET with 405, as before."""
    if not spec.ask_on_get or spec.confirm is None:
        return HttpResponseNotAllowed(["POST"])
    if not request.user.has_perm(PERMISSION) or not allowed(request.user).get(spec.perm):
        return refused(request, PermissionError(""))  # a GET tried nothing: not audited
    queue = queue_from(request)
    back = f"{reverse(spec.back)}?queue={queue.name}"
    target = request.GET.get("next", "")
    if target.startswith("/") and url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        back = target
    fields = [("queue", queue.name), ("nonce", nonce()), ("next", back)]
    return _confirmation(request, name, queue, spec.confirm(request, queue), back, fields)


def _confirmation(
    request: HttpRequest, name: str, queue: Queue, ask: Confirm, back: str,
    fields: list[tuple[str, str]] | None = None,
) -> HttpResponse:
    """The page that asks before an action; its button posts the same fields again (or
    `fields`, for the question a GET asked), with confirmed=1."""
    if fields is None:
        fields = [(k, v) for k in request.POST for v in request.POST.getlist(k)
                  if k not in ("csrfmiddlewaretoken", "confirmed")]
    return render(request, "core/confirm.html", {
        "question": ask.question, "button": ask.button, "note": ask.note,
        "items": ask.items[:SHOWN], "more": max(0, len(ask.items) - SHOWN),
        "fields": fields, "action_url": reverse("core:act", args=[name]), "back": back,
        "queue": queue.name, "danger": ask.danger,
    })

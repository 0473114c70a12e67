"""Schedules (issue 19): each recurring schedule of the queue with its expression in words,
time zone, next 5 runs, last runs with their outcome and a link to each request; a form to
create or edit one with a preview of its next runs (htmx, before saving); pause/resume and
run now (operators), edit and delete (admins). Every action is a POST through core.ops.
schedules, which checks the permission and audits it; delete asks for a confirmation first."""

from __future__ import annotations

import re
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.conf import DEFAULT_QUEUE
from core.console import schedules as forms
from core.console.queues import queue_from
from core.ops import schedules as ops
from core.ops.audit import as_actor
from core.ops.errors import BadInput, Refused, StaleState
from core.queue import Queue
from core.queue.keys import validate_id
from core.queue.schedule.spec import MISSED, OVERLAP, InvalidSchedule
from core.queue.schedule.store import Schedules

from .common import PERMISSION, console_page, page, polled

ACTIONS = ("run-now", "pause", "resume", "delete")
OPS_ACTIONS = {"run-now": "schedule-run-now", "pause": "schedule-pause",
               "resume": "schedule-resume", "delete": "schedule-remove"}
_VERSION = re.compile(r"[0-9]{1,18}")
CHANGE = "core.change_schedule"


def _context(queue: Queue, **extra: Any) -> dict[str, Any]:
    store = Schedules(queue)
    return {"rows": forms.rows(store, store.all()), "list_url": reverse("core:schedules"),
            "missed_choices": MISSED, "overlap_choices": OVERLAP, **extra}


@console_page
def schedule_list(request: HttpRequest) -> HttpResponse:
    queue = queue_from(request)
    context = _context(queue, form=forms.blank(), editing=None)
    if not polled(request):  # the polled fragment leaves the history out
        context["removed"] = forms.removed(queue.name)
    return page(request, "core/schedules.html", queue, context, nav="schedules")


@console_page
def schedule_edit(request: HttpRequest, queue_name: str, name: str) -> HttpResponse:
    queue = queue_from(request, name=queue_name)
    if not request.user.has_perm(CHANGE):
        raise PermissionDenied
    state = _require(queue, name)
    context = _context(queue, form=forms.to_form(state.schedule), editing=state)
    return page(request, "core/schedules.html", queue, context, nav="schedules", live=False)


@console_page
def schedule_preview(request: HttpRequest) -> HttpResponse:
    """The words and next runs of the form as typed (GET: it changes nothing)."""
    queue = queue_from(request)
    form = {f: request.GET.get(f, "").strip() for f in forms.FIELDS}
    form["name"] = form["name"] or "preview"
    try:
        words, runs = forms.preview(form, queue.name, Schedules(queue).now_ms())
        ctx: dict[str, Any] = {"preview_words": words, "preview_runs": runs}
    except InvalidSchedule as exc:
        ctx = {"preview_error": str(exc)}
    return render(request, "core/schedules.html#preview", ctx)


@require_POST
def schedule_save(request: HttpRequest) -> HttpResponse:
    actor = as_actor(request.user)
    original = request.POST.get("original", "")
    try:  # refused (and audited) before the form is read
        ops.require(actor, "schedule-edit" if original else "schedule-add",
                    request.GET.get("queue") or DEFAULT_QUEUE,
                    original or request.POST.get("name", ""))
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    queue = queue_from(request)
    form = {f: request.POST.get(f, "").strip() for f in forms.FIELDS}
    try:
        schedule = forms.from_form(form, queue.name)
        if original and original != schedule.name:
            raise InvalidSchedule("a schedule cannot be renamed: create a new one and delete "
                                  f"{original}")
        change = ops.save(actor, schedule, mode="replace" if original else "create",
                          expect_version=_version(request.POST.get("version", "")))
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    except (InvalidSchedule, BadInput, StaleState) as exc:
        editing = Schedules(queue).get(original) if original else None
        context = _context(queue, form=form, editing=editing, error=str(exc))
        return page(request, "core/schedules.html", queue, context, nav="schedules",
                    status=400, live=False)
    verb = {"created": "Created", "updated": "Saved", "unchanged": "Nothing changed in"}
    messages.success(request, f"{verb[change.status]} schedule {schedule.name}.")
    return HttpResponseRedirect(f"{reverse('core:schedules')}?queue={queue.name}")


def _version(text: str) -> int | None:
    """The version the edit form was opened at (None: a new schedule); BadInput for anything
    but digits (`²` is a digit to str.isdigit(), not to int())."""
    text = text.strip()
    if not text:
        return None
    if not _VERSION.fullmatch(text):
        raise BadInput(f"version {text[:20]!r} is not the whole number the edit form sends: "
                       "open the schedule's edit page again")
    return int(text)


def schedule_act(request: HttpRequest, queue_name: str, name: str, action: str) -> HttpResponse:
    """POST: run-now, pause, resume, delete (delete: the first POST, without `confirm`, shows
    what it would delete). A GET shows the confirmation page of delete only."""
    if action not in ACTIONS:
        raise Http404(f"No schedule action {action!r}.")
    if request.method == "POST":  # refused (and audited) before anything is looked up
        try:
            ops.require(as_actor(request.user), OPS_ACTIONS[action], queue_name, name)
        except Refused as exc:
            raise PermissionDenied(str(exc)) from exc
    if not request.user.has_perm(PERMISSION):
        raise PermissionDenied
    if request.method not in ("POST", "GET", "HEAD") or \
            (request.method != "POST" and action != "delete"):
        return HttpResponse(status=405, headers={"Allow": "POST"})
    queue = queue_from(request, name=queue_name)
    back = f"{reverse('core:schedules')}?queue={queue.name}"
    try:
        state = _require(queue, name)
    except Http404:
        if request.method != "POST" or not validate_name(name):
            raise
        # A stale page (another tab or operator deleted it): back to the list, said so.
        messages.info(request, f"Nothing done: there is no schedule {name!r} in queue "
                               f"{queue.name!r} now (deleted meanwhile?).")
        return HttpResponseRedirect(back)
    if action == "delete" and request.POST.get("confirm") != "yes":
        if not request.user.has_perm(CHANGE):
            raise PermissionDenied
        context = _context(queue, form=forms.blank(), editing=None, confirm=state)
        return page(request, "core/schedules.html", queue, context, nav="schedules",
                    live=False)
    actor = as_actor(request.user)
    fn = {"run-now": ops.run_now, "pause": ops.pause, "resume": ops.resume,
          "delete": ops.remove}[action]
    try:
        result = fn(actor, queue.name, name)
    except Refused as exc:
        raise PermissionDenied(str(exc)) from exc
    except (BadInput, StaleState) as exc:
        messages.error(request, str(exc))
        return HttpResponseRedirect(back)
    if action == "run-now":
        messages.success(request, f"Schedule {name}: run {result} submitted.")
    elif result:
        past = {"pause": "paused", "resume": "resumed", "delete": "deleted"}[action]
        messages.success(request, f"Schedule {name} {past}.")
    else:
        messages.info(request, f"Schedule {name} was already {action}d: nothing changed.")
    return HttpResponseRedirect(back)


def validate_name(name: str) -> bool:
    try:
        validate_id(name, "schedule name")
    except ValueError:
        return False
    return True


def _require(queue: Queue, name: str) -> Any:
    try:
        validate_id(name, "schedule name")
    except ValueError as exc:
        raise Http404(str(exc)) from exc
    state = Schedules(queue).get(name)
    if state is None:
        raise Http404(f"No schedule {name!r} in queue {queue.name!r}.")
    return state

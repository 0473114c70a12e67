"""The Django admin: the history (Request, DeadLetter), the audit log and the bulk actions,
read-only (Redis owns the live state, and an audit entry is never edited); the admin
actions "requeue dead tasks" and "cancel" go through the service layer (core.ops), which
checks the permission, acts on what is still in that state, and audits the run.

Users, groups (their permissions) and the login lockouts (django-axes' access attempts) are
edited here too: every addition, change and deletion is one audit entry (source "admin"),
written where Django writes its own admin log entry, and deleting access attempts (the
"Unlock" action) is the unlock."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from axes.admin import AccessAttemptAdmin, AccessLogAdmin
from axes.models import AccessAttempt, AccessLog
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.models import LogEntry
from django.contrib.admin.views.main import SEARCH_VAR
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import IntegerField, Model, QuerySet
from django.http import HttpRequest, HttpResponseBadRequest

from core.models import AuditEntry, BulkAction, DeadLetter, Request, ScheduleRecord
from core.ops import actions, audit
from core.ops.audit import as_actor
from core.ops.errors import OpsError
from core.ops.perms import permission_for
from core.queue import QueueError

MAX_SEARCH = 200  # characters of the admin's search box (SQLite refuses a LIKE of ~50 KB)


class Bounded(admin.ModelAdmin):
    """A list page that answers junk with a message, never a 500: a search too long for the
    database, an action's selection naming no possible primary key."""

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        if any("\0" in v for values in request.GET.lists() for v in values[1]):
            return HttpResponseBadRequest(  # PostgreSQL holds no NUL in a string: no row has one
                "A filter or search holds a NUL character.",
                content_type="text/plain; charset=utf-8")
        search = request.GET.get(SEARCH_VAR, "")
        if len(search) > MAX_SEARCH:
            return HttpResponseBadRequest(
                f"The search is {len(search):,} characters long: at most {MAX_SEARCH}.",
                content_type="text/plain; charset=utf-8")
        if request.method == "POST":
            bad = [v for v in request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
                   if not _possible_key(self.model, v)]
            if bad:
                return HttpResponseBadRequest(
                    f"The selection names {bad[0][:40]!r}, which is no "
                    f"{self.model._meta.verbose_name}'s id.",
                    content_type="text/plain; charset=utf-8")
        return super().changelist_view(request, extra_context)


def _possible_key(model: type[Model], value: str) -> bool:
    """`value` is a primary key the model's table could hold (an integer key within 64 bits)."""
    field = model._meta.pk
    if field is None:
        return False
    try:
        key = field.to_python(value)
    except (ValidationError, ValueError, TypeError):
        return False
    if isinstance(field, IntegerField):
        return isinstance(key, int) and -(2**63) <= key < 2**63
    return key is not None


class ReadOnly(Bounded):
    """Nothing added, changed or deleted here: the mirror and the service layer write these."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _by_queue(rows: QuerySet[Any], field: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for queue, key in rows.values_list("queue", field):
        out.setdefault(queue, []).append(key)
    return out


def _act(modeladmin: admin.ModelAdmin, request: HttpRequest, action: str,
         by_queue: dict[str, list[str]], fn: Any) -> None:
    actor = as_actor(request.user, source="admin")
    for queue, ids in by_queue.items():
        for i in range(0, len(ids), actions.CHUNK):
            try:
                result = fn(actor, queue, ids[i : i + actions.CHUNK])
            except (OpsError, QueueError) as exc:
                modeladmin.message_user(request, f"{queue}: {exc}", messages.ERROR)
                return
            level = messages.WARNING if result.skipped else messages.SUCCESS
            modeladmin.message_user(request, f"{queue}: {result.message}", level)


@admin.register(Request)
class RequestAdmin(ReadOnly):
    list_display = ("request_id", "queue", "state", "priority", "tenant", "handler", "total",
                    "done", "dead", "discarded", "cancelled", "created_at", "finished_at")
    list_filter = ("queue", "state")
    search_fields = ("request_id", "tenant", "handler")
    date_hierarchy = "created_at"
    actions = ["cancel_requests"]

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(permission_for("cancel")))

    @admin.action(description="Cancel the selected requests", permissions=["cancel"])
    def cancel_requests(self, request: HttpRequest, queryset: QuerySet[Request]) -> None:
        _act(self, request, "cancel", _by_queue(queryset, "request_id"), actions.cancel)


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnly):
    list_display = ("entry_id", "queue", "request_id", "handler", "exception", "attempts",
                    "dead_at", "resolution")
    list_filter = ("queue", "resolution", "handler", "exception")
    search_fields = ("entry_id", "request_id", "fingerprint", "error")
    date_hierarchy = "dead_at"
    actions = ["requeue_dead_tasks"]

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(permission_for("requeue")))

    @admin.action(description="Requeue dead tasks", permissions=["requeue"])
    def requeue_dead_tasks(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        # Letters resolved already are left out; the engine skips any requeued meanwhile.
        rows = queryset.filter(resolution="")
        _act(self, request, "requeue", _by_queue(rows, "entry_id"), actions.requeue_dead)


@admin.register(ScheduleRecord)
class ScheduleRecordAdmin(ReadOnly):
    """The recurring schedules' history, as the mirror keeps it (changed only through the
    console or `manage.py schedule`; `schedule restore` brings back what Redis lost)."""

    list_display = ("name", "queue", "version", "paused", "next_run", "fired", "errors",
                    "created_at", "updated_at", "removed_at", "removed_by")
    list_filter = ("queue", "paused", ("removed_at", admin.EmptyFieldListFilter))
    search_fields = ("name", "removed_by")


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnly):
    list_display = ("at", "actor", "source", "action", "queue", "count", "acted", "skipped",
                    "refused", "error")
    list_filter = ("action", "source", "refused")
    search_fields = ("actor", "target", "queue")
    date_hierarchy = "at"


@admin.register(BulkAction)
class BulkActionAdmin(ReadOnly):
    list_display = ("id", "description", "status", "count", "acted", "skipped", "actor_name",
                    "created_at", "finished_at")
    list_filter = ("status", "action")
    exclude = ("target_ids",)


# -- users, groups and login lockouts: every change audited --------------------------------


class Audited(Bounded):
    """Each add, change (a user's groups and permissions, a group's permissions, a password)
    and delete made here writes one audit entry beside Django's own admin log entry: the
    actor the admin user, the action "<model>-add|change|delete", the target what changed."""

    audit_name = ""  # the action's prefix: "user", "group"

    def describe(self, obj: Any) -> str:
        """The object as the audit entry names it (with what it is now, after a change)."""
        return f"{self.audit_name} {str(obj)!r}"

    def _record(self, request: HttpRequest, verb: str, objs: list[Any], said: str) -> None:
        what = "; ".join(self.describe(o) for o in objs[: audit.TARGET_IDS_SHOWN])
        more = len(objs) - audit.TARGET_IDS_SHOWN
        what += f" and {more:,} more" if more > 0 else ""
        audit.record(as_actor(request.user, source="admin"), self.audit_action(verb), "",
                     target=f"{what}{': ' + said if said else ''}", count=len(objs),
                     acted=len(objs))

    def audit_action(self, verb: str) -> str:
        return f"{self.audit_name}-{verb}"

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        entry = super().log_addition(request, obj, message)
        self._record(request, "add", [obj], _said(entry))
        return entry

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        entry = super().log_change(request, obj, message)
        self._record(request, "change", [obj], _said(entry))
        return entry

    def log_deletions(self, request: HttpRequest, queryset: Iterable[Model]) -> Any:
        objs = list(queryset)
        entries = super().log_deletions(request, objs)
        self._record(request, "delete", objs, "")
        return entries


def _said(entry: Any) -> str:
    """What Django's log entry says changed ("Changed Groups and User permissions.")."""
    return str(entry.get_change_message()) if isinstance(entry, LogEntry) else ""


admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class AuditedUserAdmin(Audited, UserAdmin):
    audit_name = "user"

    def describe(self, obj: Any) -> str:
        groups = ", ".join(sorted(obj.groups.values_list("name", flat=True))) or "none"
        flags = [f for f, on in (("active", obj.is_active), ("staff", obj.is_staff),
                                 ("superuser", obj.is_superuser)) if on]
        return (f"user {obj.get_username()!r} (groups: {groups}; "
                f"{', '.join(flags) or 'inactive'})")


@admin.register(Group)
class AuditedGroupAdmin(Audited, GroupAdmin):
    audit_name = "group"

    def describe(self, obj: Any) -> str:
        perms = sorted(f"{app}.{code}" for app, code in obj.permissions.values_list(
            "content_type__app_label", "codename"))
        return f"group {obj.name!r} (permissions: {', '.join(perms) or 'none'})"


@admin.register(AccessAttempt)
class UnlockAdmin(Audited, AccessAttemptAdmin):
    """django-axes' failed logins per user name and address: deleting them (the Unlock
    action, or Delete) lifts the lockout they caused; audited as "unlock"."""

    audit_name = "unlock"
    actions = ["unlock"]  # not axes' "clean up expired": a change that no entry would record

    def audit_action(self, verb: str) -> str:
        return "unlock" if verb == "delete" else f"{self.audit_name}-{verb}"

    def describe(self, obj: Any) -> str:
        return (f"failed logins of user name {obj.username!r} from {obj.ip_address} "
                f"({obj.failures_since_start})")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # what axes recorded is not edited, only deleted

    @admin.action(description="Unlock: forget the selected failed logins",
                  permissions=["delete"])
    def unlock(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        with transaction.atomic():
            objs = list(queryset.select_for_update())
            self.log_deletions(request, objs)
            AccessAttempt.objects.filter(pk__in=[o.pk for o in objs]).delete()
        self.message_user(request, f"Unlocked: {len(objs)} record(s) of failed logins removed; "
                                   "their user names and addresses may log in again.",
                          messages.SUCCESS)


@admin.register(AccessLog)
class LoginLogAdmin(AccessLogAdmin, ReadOnly):
    """Successful logins and logouts, as django-axes records them: read-only."""

"""The Django admin: the history (Request, DeadLetter), the audit log and the bulk actions,
read-only (Redis owns the live state, and an audit entry is never edited); the admin
actions "requeue dead tasks" and "cancel" go through the service layer (core.ops), which
checks the permission, acts on what is still in that state, and audits the run."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from core.models import AuditEntry, BulkAction, DeadLetter, Request
from core.ops import actions
from core.ops.audit import as_actor
from core.ops.errors import OpsError
from core.ops.perms import permission_for
from core.queue import QueueError


class ReadOnly(admin.ModelAdmin):
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

"""Which permission each operator action needs, and what a user may do.

| codename (app core)  | actions                            | groups          |
|----------------------|------------------------------------|-----------------|
| view_console         | read every page                    | viewer operator admin |
| requeue_deadletter   | requeue                            | operator admin  |
| cancel_request       | cancel; run now (a delayed request) | operator admin |
| claim_task           | claim, release, reclaim            | operator admin  |
| delete_deadletter    | delete                             | admin           |
| pause_queue          | pause, resume; limits set, remove  | admin           |
| submit_datajob       | the Data jobs page's submit form   | operator admin  |
| run_schedule         | a schedule's run now, pause, resume | operator admin |
| change_schedule      | create, edit, delete, restore a schedule | admin     |
| control_worker       | a worker's quiet, stop, resume     | admin           |
| change_retentionsetting | retention set and unset, prune now | admin        |
| manage_alerts        | alert rules and channels, a channel's test | admin   |
| submit_request       | the HTTP API's submit of a request | operator admin  |
| view_apitoken, delete_apitoken | every user's API tokens (one's own: always) | admin |

The admin group also sees django-axes' failed logins and login log in the Django admin and
may unlock (delete failed logins): axes.view_accessattempt, axes.delete_accessattempt,
axes.view_accesslog (migration 0007).

An HTTP API token (issue 38, core.ops.tokens) acts with its user's permissions, narrowed by its
scope: `read` allows the view permissions only, `operate` adds those of the operator group,
`admin` takes the user's as they are (scope_allows).

Granted through groups (migrations 0004, 0005, 0007, 0009, 0012, 0017, 0020), never through
is_staff or is_superuser alone (a superuser has every permission, as Django gives it).
"""

from __future__ import annotations

from typing import Any

# The buttons' keys (what allowed() returns) -> permission.
PERMISSIONS = {
    "requeue": "core.requeue_deadletter",
    "delete": "core.delete_deadletter",
    "cancel": "core.cancel_request",
    "claim": "core.claim_task",
    "pause": "core.pause_queue",
    "schedule_run": "core.run_schedule",
    "schedule_change": "core.change_schedule",
    "control": "core.control_worker",
    "retention": "core.change_retentionsetting",
    "alerts": "core.manage_alerts",
    "limits": "core.pause_queue",  # a limit is flow control of the queue, as a pause is
}
# Every action -> the key of its permission.
NEEDS = {
    "requeue": "requeue", "delete": "delete", "cancel": "cancel", "claim": "claim",
    "release": "claim", "reclaim": "claim", "pause": "pause", "resume": "pause",
    "run-now": "cancel",
    "schedule-run-now": "schedule_run", "schedule-pause": "schedule_run",
    "schedule-resume": "schedule_run", "schedule-add": "schedule_change",
    "schedule-edit": "schedule_change", "schedule-remove": "schedule_change",
    "schedule-restore": "schedule_change",
    "worker-quiet": "control", "worker-stop": "control", "worker-resume": "control",
    "retention-set": "retention", "retention-unset": "retention", "prune": "retention",
    "alert-channel-add": "alerts", "alert-channel-remove": "alerts",
    "alert-channel-test": "alerts", "alert-rule-add": "alerts", "alert-rule-remove": "alerts",
    "alert-rule-enable": "alerts", "alert-rule-disable": "alerts",
    "limit-set": "limits", "limit-remove": "limits",
}
# The roles' groups, as migration 0004 grants them (codenames of app core).
GROUPS = {
    "viewer": ["view_console"],
    "operator": ["view_console", "requeue_deadletter", "cancel_request", "claim_task",
                 "submit_datajob", "run_schedule", "submit_request"],
    "admin": ["view_console", "requeue_deadletter", "cancel_request", "claim_task",
              "delete_deadletter", "pause_queue", "view_request", "view_deadletter",
              "view_auditentry", "view_bulkaction", "submit_datajob",
              "run_schedule", "change_schedule", "control_worker", "view_schedulerecord",
              "change_retentionsetting", "manage_alerts", "submit_request",
              "view_apitoken", "delete_apitoken"],
}
# A token's scope -> the codenames (app core) it lets its user's permissions through; a
# view_* permission passes every scope, and `admin` everything.
SCOPE_ALLOWS = {
    "read": frozenset({"view_console"}),
    "operate": frozenset({"view_console", *GROUPS["operator"]}),
}


def allowed(user: Any) -> dict[str, bool]:
    """Which action buttons `user` may see, keyed requeue, delete, cancel, claim, pause,
    schedule_run, schedule_change, control, retention, alerts, limits."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return dict.fromkeys(PERMISSIONS, False)
    return {key: bool(user.has_perm(perm)) for key, perm in PERMISSIONS.items()}


def permission_for(action: str) -> str:
    """The permission (app_label.codename) that `action` needs."""
    return PERMISSIONS[NEEDS[action]]


def scope_allows(scope: str | None, permission: str) -> bool:
    """Whether a token of `scope` lets its user use `permission` (app_label.codename); no
    scope (the console, the command line) narrows nothing."""
    if scope is None or scope == "admin":
        return True
    app, _, codename = permission.partition(".")
    if app == "core" and codename.startswith("view_"):
        return True
    return app == "core" and codename in SCOPE_ALLOWS.get(scope, frozenset())


def scope_for(permission: str) -> str:
    """The narrowest scope that lets `permission` through."""
    return next(s for s in ("read", "operate", "admin") if scope_allows(s, permission))

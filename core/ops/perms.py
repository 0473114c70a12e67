"""Which permission each operator action needs, and what a user may do.

| codename (app core)  | actions                            | groups          |
|----------------------|------------------------------------|-----------------|
| view_console         | read every page                    | viewer operator admin |
| requeue_deadletter   | requeue                            | operator admin  |
| cancel_request       | cancel; run now (a delayed request) | operator admin |
| claim_task           | claim, release, reclaim            | operator admin  |
| delete_deadletter    | delete                             | admin           |
| pause_queue          | pause, resume                      | admin           |
| submit_datajob       | the Data jobs page's submit form   | operator admin  |
| run_schedule         | a schedule's run now, pause, resume | operator admin |
| change_schedule      | create, edit, delete, restore a schedule | admin     |
| control_worker       | a worker's quiet, stop, resume     | admin           |

The admin group also sees django-axes' failed logins and login log in the Django admin and
may unlock (delete failed logins): axes.view_accessattempt, axes.delete_accessattempt,
axes.view_accesslog (migration 0007).

Granted through groups (migrations 0004, 0005, 0007, 0009, 0012), never through is_staff or
is_superuser alone (a superuser has every permission, as Django gives it).
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
}
# The roles' groups, as migration 0004 grants them (codenames of app core).
GROUPS = {
    "viewer": ["view_console"],
    "operator": ["view_console", "requeue_deadletter", "cancel_request", "claim_task",
                 "submit_datajob", "run_schedule"],
    "admin": ["view_console", "requeue_deadletter", "cancel_request", "claim_task",
              "delete_deadletter", "pause_queue", "view_request", "view_deadletter",
              "view_auditentry", "view_bulkaction", "submit_datajob",
              "run_schedule", "change_schedule", "control_worker", "view_schedulerecord"],
}


def allowed(user: Any) -> dict[str, bool]:
    """Which action buttons `user` may see, keyed requeue, delete, cancel, claim, pause,
    schedule_run, schedule_change, control."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return dict.fromkeys(PERMISSIONS, False)
    return {key: bool(user.has_perm(perm)) for key, perm in PERMISSIONS.items()}


def permission_for(action: str) -> str:
    """The permission (app_label.codename) that `action` needs."""
    return PERMISSIONS[NEEDS[action]]

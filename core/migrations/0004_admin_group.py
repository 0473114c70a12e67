"""The operator actions' permissions, granted to the roles' groups; the admin group is new.

viewer   reads every page
operator also requeues dead letters, cancels requests, claims/releases pending entries and
         reclaims dead workers
admin    also deletes dead letters and pauses/resumes queues, and views the history and the
         audit log in the Django admin (core.ops.perms holds the same table)
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

# Frozen here as it was when written: a later change of the roles is a new migration.
GROUPS = {
    "viewer": ["view_console"],
    "operator": ["view_console", "requeue_deadletter", "cancel_request", "claim_task"],
    "admin": ["view_console", "requeue_deadletter", "cancel_request", "claim_task",
              "delete_deadletter", "pause_queue", "view_request", "view_deadletter",
              "view_auditentry", "view_bulkaction"],
}


def grant(apps: Any, schema_editor: Any) -> None:
    from django.contrib.auth.management import create_permissions

    # Permissions are made after all migrations by default: make ours now.
    config = apps.get_app_config("core")
    config.models_module = True  # a migration's app stub has none; create_permissions asks
    create_permissions(config, apps=apps, verbosity=0)
    config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for name, codenames in GROUPS.items():
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.add(
            *Permission.objects.filter(content_type__app_label="core", codename__in=codenames)
        )


def revoke(apps: Any, schema_editor: Any) -> None:
    Group = apps.get_model("auth", "Group")
    Group.objects.filter(name="admin").delete()
    Permission = apps.get_model("auth", "Permission")
    added = {c for names in GROUPS.values() for c in names} - {"view_console"}
    for group in Group.objects.filter(name__in=["viewer", "operator"]):
        group.permissions.remove(
            *Permission.objects.filter(content_type__app_label="core", codename__in=added)
        )


class Migration(migrations.Migration):
    dependencies = [("core", "0003_operator_actions")]

    operations = [migrations.RunPython(grant, revoke)]

"""Login lockouts (django-axes): the admin group may see the failed logins and the login log
in the Django admin, and unlock a user name or address by deleting its failed logins
(audited, core/admin.py)."""

from __future__ import annotations

from typing import Any

from django.db import migrations

# Frozen here as it was when written (app axes): a later change is a new migration.
GRANTS = ["view_accessattempt", "delete_accessattempt", "view_accesslog"]


def grant(apps: Any, schema_editor: Any) -> None:
    from django.contrib.auth.management import create_permissions

    config = apps.get_app_config("axes")
    config.models_module = True  # as in 0004: make the permissions now, not after migrate
    create_permissions(config, apps=apps, verbosity=0)
    config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    group, _ = Group.objects.get_or_create(name="admin")
    group.permissions.add(
        *Permission.objects.filter(content_type__app_label="axes", codename__in=GRANTS))


def revoke(apps: Any, schema_editor: Any) -> None:
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for group in Group.objects.filter(name="admin"):
        group.permissions.remove(
            *Permission.objects.filter(content_type__app_label="axes", codename__in=GRANTS))


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0006_request_state_held"),
        ("axes", "0010_accessattemptexpiration"),
    ]

    operations = [migrations.RunPython(grant, revoke)]

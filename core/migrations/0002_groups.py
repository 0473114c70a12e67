"""The console's roles as groups: permissions decide what a user may see and do, not is_staff.

viewer   reads every page of the console
operator reads every page (the operator actions add their permissions to this group)
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

GROUPS = {
    "viewer": ["view_console"],
    "operator": ["view_console"],
}


def create_groups(apps: Any, schema_editor: Any) -> None:
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


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_history"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(create_groups, migrations.RunPython.noop)]

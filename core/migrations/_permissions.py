"""What the migrations that grant permissions share (not a migration: the loader skips names
starting with "_")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def grant_permissions(apps: Any, grants: Mapping[str, tuple[str, ...]]) -> None:
    """Make core's permissions now (not after migrate, as 0004 does) and add each of `grants`
    (codename -> group names) to its groups, making a group that does not exist yet."""
    from django.contrib.auth.management import create_permissions

    config = apps.get_app_config("core")
    config.models_module = True
    create_permissions(config, apps=apps, verbosity=0)
    config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for codename, groups in grants.items():
        perm = Permission.objects.get(content_type__app_label="core", codename=codename)
        for name in groups:
            group, _ = Group.objects.get_or_create(name=name)
            group.permissions.add(perm)

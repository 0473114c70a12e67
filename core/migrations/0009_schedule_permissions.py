"""Recurring schedules (issue 19): core.run_schedule (run now, pause, resume) for the
operator and admin groups, core.change_schedule (create, edit, delete) for admins."""

from typing import Any

from django.db import migrations

from core.migrations._permissions import grant_permissions

GRANTS = {"run_schedule": ("operator", "admin"), "change_schedule": ("admin",)}


def grant(apps: Any, schema_editor: Any) -> None:
    grant_permissions(apps, GRANTS)


def revoke(apps: Any, schema_editor: Any) -> None:
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.filter(content_type__app_label="core", codename__in=GRANTS).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0008_request_state_scheduled'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='request',
            options={'permissions': [('view_console', 'Can view the operations console'), ('cancel_request', 'Can cancel requests'), ('claim_task', 'Can claim or release pending tasks and reclaim dead workers'), ('pause_queue', 'Can pause and resume a queue'), ('submit_datajob', 'Can submit data jobs'), ('run_schedule', 'Can run now, pause and resume schedules'), ('change_schedule', 'Can create, edit and delete schedules')]},
        ),
        migrations.RunPython(grant, revoke),
    ]

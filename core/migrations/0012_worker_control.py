"""Worker control (issue 20): core.control_worker (a worker's quiet, stop and resume, from
the workers page and `manage.py worker`) for the admin group."""

from typing import Any

from django.db import migrations

from core.migrations._permissions import grant_permissions

GRANTS = {"control_worker": ("admin",)}


def grant(apps: Any, schema_editor: Any) -> None:
    grant_permissions(apps, GRANTS)


def revoke(apps: Any, schema_editor: Any) -> None:
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.filter(content_type__app_label="core", codename__in=GRANTS).delete()


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0011_search'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='request',
            options={'permissions': [('view_console', 'Can view the operations console'), ('cancel_request', 'Can cancel requests'), ('claim_task', 'Can claim or release pending tasks and reclaim dead workers'), ('pause_queue', 'Can pause and resume a queue'), ('submit_datajob', 'Can submit data jobs'), ('run_schedule', 'Can run now, pause and resume schedules'), ('change_schedule', 'Can create, edit and delete schedules'), ('control_worker', 'Can quiet, stop and resume workers')]},
        ),
        migrations.RunPython(grant, revoke),
    ]

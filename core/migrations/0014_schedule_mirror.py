# Recurring schedules in the database (issue 19): their history, kept by the mirror, and what
# `manage.py schedule restore` declares again after Redis lost its data.

from typing import Any

from django.db import migrations, models


def grant(apps: Any, schema_editor: Any) -> None:
    """The admin group sees the schedules' history in the Django admin (as in 0009: the
    permission is made now, not after migrate)."""
    from django.contrib.auth.management import create_permissions

    config = apps.get_app_config("core")
    config.models_module = True
    create_permissions(config, apps=apps, verbosity=0)
    config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    perm = Permission.objects.get(content_type__app_label="core",
                                  codename="view_schedulerecord")
    group, _ = Group.objects.get_or_create(name="admin")
    group.permissions.add(perm)


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0012_worker_control'),
    ]

    operations = [
        migrations.CreateModel(
            name='ScheduleRecord',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('queue', models.CharField(max_length=200)),
                ('name', models.CharField(max_length=200)),
                ('definition', models.JSONField(default=dict)),
                ('version', models.PositiveIntegerField(default=0)),
                ('paused', models.BooleanField(default=False)),
                ('paused_by', models.CharField(blank=True, default='', max_length=200)),
                ('next_run', models.DateTimeField(blank=True, null=True)),
                ('last_slot', models.DateTimeField(blank=True, null=True)),
                ('fired', models.BigIntegerField(default=0)),
                ('skipped', models.BigIntegerField(default=0)),
                ('errors', models.BigIntegerField(default=0)),
                ('created_at', models.DateTimeField()),
                ('updated_at', models.DateTimeField()),
                ('created_ms', models.BigIntegerField(default=0)),
                ('seen_at', models.DateTimeField()),
                ('removed_at', models.DateTimeField(blank=True, null=True)),
                ('removed_by', models.CharField(blank=True, default='', max_length=200)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('queue', 'name'), name='schedule_queue_name')],
            },
        ),
        migrations.RunPython(grant, migrations.RunPython.noop),
    ]

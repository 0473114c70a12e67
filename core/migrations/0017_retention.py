"""Retention by kind and queue, and pruning (issue 35): the retention an admin set per kind and
queue (RetentionSetting, over the QA_RETAIN_* settings), the pruner's passes (PruneRun), the
resolved dead letters by when (a partial index: what the pruner walks), and
core.change_retentionsetting for the admin group (the console's Retention page, `manage.py
retention set --as`)."""

from typing import Any

from django.db import migrations, models

from core.migrations._permissions import grant_permissions

GRANTS = {"change_retentionsetting": ("admin",)}


def grant(apps: Any, schema_editor: Any) -> None:
    grant_permissions(apps, GRANTS)


def revoke(apps: Any, schema_editor: Any) -> None:
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for codename, groups in GRANTS.items():
        for perm in Permission.objects.filter(content_type__app_label="core",
                                              codename=codename):
            for group in Group.objects.filter(name__in=groups):
                group.permissions.remove(perm)


class Migration(migrations.Migration):
    dependencies = [("core", "0016_mirror")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.CreateModel(
            name="PruneRun",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("started_at", models.DateTimeField()),
                ("seconds", models.FloatField(default=0.0)),
                ("source", models.CharField(default="services", max_length=10)),
                ("removed", models.JSONField(default=dict)),
                ("batches", models.PositiveIntegerField(default=0)),
                ("longest_ms", models.FloatField(default=0.0)),
                ("longest_at", models.CharField(default="", max_length=250)),
                ("error", models.TextField(blank=True, default="")),
            ],
            options={
                "indexes": [models.Index(fields=["started_at"], name="prune_run_started")],
            },
        ),
        migrations.CreateModel(
            name="RetentionSetting",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("kind", models.CharField(max_length=20)),
                ("queue", models.CharField(blank=True, default="", max_length=200)),
                ("seconds", models.BigIntegerField(blank=True, null=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                ("updated_by", models.CharField(default="", max_length=200)),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("kind", "queue"),
                                                        name="retention_kind_queue")],
            },
        ),
        migrations.AddIndex(
            model_name="deadletter",
            index=models.Index(condition=models.Q(("resolution", ""), _negated=True),
                               fields=["queue", "resolved_at"], name="dead_resolved"),
        ),
        migrations.RunPython(grant, revoke),
    ]

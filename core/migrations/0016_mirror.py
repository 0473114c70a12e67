"""The mirror at the engine's speed (issue 35): where each queue's `events` stream is applied to,
so that several mirror processes apply its batches once each and in order."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("core", "0015_request_events")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.CreateModel(
            name="MirrorPosition",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False,
                                           verbose_name="ID")),
                ("queue", models.CharField(max_length=200, unique=True)),
                ("applied_to", models.CharField(default="0-0", max_length=40)),
                ("updated_at", models.DateTimeField(auto_now=True)),
            ],
        ),
    ]

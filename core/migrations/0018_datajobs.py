"""Data jobs in the database (issue 35): DataJob (spec, split plan, EXPLAIN of its SQL,
manifest, state and timings) and DataJobChunk (each chunk's report), which the mirror copies
from the job's Redis record (core.mirror.datajobs), so that the job's page outlives it."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("core", "0017_retention")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.CreateModel(
            name="DataJob",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("queue", models.CharField(max_length=200)),
                ("job_id", models.CharField(max_length=200)),
                ("state", models.CharField(choices=[
                    ("scheduled", "scheduled"), ("running", "running"), ("done", "done"),
                    ("failed", "failed"), ("cancelled", "cancelled"), ("expired", "expired"),
                ], max_length=12)),
                ("cancelled", models.BooleanField(default=False)),
                ("spec", models.TextField()),
                ("priority", models.PositiveSmallIntegerField(default=0)),
                ("tenant", models.CharField(default="", max_length=200)),
                ("split_how", models.CharField(default="", max_length=20)),
                ("chunks", models.PositiveIntegerField(blank=True, null=True)),
                ("input_rows", models.BigIntegerField(blank=True, null=True)),
                ("plan", models.TextField(blank=True, default="")),
                ("split_seconds", models.FloatField(blank=True, null=True)),
                ("explain_sql", models.TextField(blank=True, default="")),
                ("explain_combine", models.TextField(blank=True, default="")),
                ("chunks_done", models.PositiveIntegerField(default=0)),
                ("chunks_failed", models.PositiveIntegerField(default=0)),
                ("rows_in", models.BigIntegerField(blank=True, null=True)),
                ("rows_out", models.BigIntegerField(blank=True, null=True)),
                ("chunk_seconds", models.FloatField(blank=True, null=True)),
                ("combine_seconds", models.FloatField(blank=True, null=True)),
                ("manifest", models.TextField(blank=True, default="")),
                ("failures", models.TextField(blank=True, default="")),
                ("letters", models.TextField(blank=True, default="")),
                ("created_at", models.DateTimeField()),
                ("finished_at", models.DateTimeField(blank=True, db_index=True, null=True)),
                ("updated_at", models.DateTimeField()),
            ],
            options={
                "indexes": [
                    models.Index(fields=["queue", "created_at", "id"],
                                 name="datajob_queue_created"),
                    models.Index(fields=["queue", "finished_at"],
                                 name="datajob_queue_finished"),
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("queue", "job_id"), name="datajob_queue_id"),
                ],
            },
        ),
        migrations.CreateModel(
            name="DataJobChunk",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                           serialize=False, verbose_name="ID")),
                ("chunk", models.PositiveIntegerField()),
                ("state", models.CharField(choices=[("done", "done"), ("failed", "failed")],
                                           max_length=12)),
                ("rows_in", models.BigIntegerField(blank=True, null=True)),
                ("rows_out", models.BigIntegerField(blank=True, null=True)),
                ("seconds", models.FloatField(blank=True, null=True)),
                ("attempt", models.PositiveIntegerField(blank=True, null=True)),
                ("worker", models.CharField(default="", max_length=200)),
                ("part_written_by", models.CharField(default="", max_length=10)),
                ("input_bytes", models.BigIntegerField(blank=True, null=True)),
                ("shuffle_read_bytes", models.BigIntegerField(blank=True, null=True)),
                ("shuffle_write_bytes", models.BigIntegerField(blank=True, null=True)),
                ("error", models.TextField(blank=True, default="")),
                ("letter", models.CharField(blank=True, default="", max_length=40)),
                ("fingerprint", models.CharField(blank=True, default="", max_length=64)),
                ("job", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE,
                                          related_name="chunk_rows", to="core.datajob")),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(fields=("job", "chunk"),
                                            name="datajobchunk_job_chunk"),
                ],
            },
        ),
    ]

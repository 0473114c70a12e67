# Per-handler metrics (issue 20): the minutes the engine counts in Redis, rolled by the mirror
# into minute rows (a day), hour rows (90 days) and totals (for /metrics), and its cursor.

from django.db import migrations, models

import core.models


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0009_schedule_permissions'),
    ]

    operations = [
        migrations.CreateModel(
            name='MetricsCursor',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('queue', models.CharField(max_length=200, unique=True)),
                ('minute', models.BigIntegerField()),
            ],
        ),
        migrations.CreateModel(
            name='HandlerHour',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('queue', models.CharField(max_length=200)),
                ('handler', models.CharField(max_length=128)),
                ('done', models.BigIntegerField(default=0)),
                ('failed', models.BigIntegerField(default=0)),
                ('retried', models.BigIntegerField(default=0)),
                ('run_us', models.BigIntegerField(default=0)),
                ('buckets', models.JSONField(default=core.models._no_buckets)),
                ('fail_us', models.BigIntegerField(default=0)),
                ('hour', models.DateTimeField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('queue', 'hour', 'handler'), name='handler_hour_unique')],
            },
        ),
        migrations.CreateModel(
            name='HandlerMinute',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('queue', models.CharField(max_length=200)),
                ('handler', models.CharField(max_length=128)),
                ('done', models.BigIntegerField(default=0)),
                ('failed', models.BigIntegerField(default=0)),
                ('retried', models.BigIntegerField(default=0)),
                ('run_us', models.BigIntegerField(default=0)),
                ('buckets', models.JSONField(default=core.models._no_buckets)),
                ('fail_us', models.BigIntegerField(default=0)),
                ('minute', models.DateTimeField()),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('queue', 'minute', 'handler'), name='handler_minute_unique')],
            },
        ),
        migrations.CreateModel(
            name='HandlerTotal',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('queue', models.CharField(max_length=200)),
                ('handler', models.CharField(max_length=128)),
                ('done', models.BigIntegerField(default=0)),
                ('failed', models.BigIntegerField(default=0)),
                ('retried', models.BigIntegerField(default=0)),
                ('run_us', models.BigIntegerField(default=0)),
                ('buckets', models.JSONField(default=core.models._no_buckets)),
                ('fail_us', models.BigIntegerField(default=0)),
            ],
            options={
                'constraints': [models.UniqueConstraint(fields=('queue', 'handler'), name='handler_total_unique')],
            },
        ),
    ]

"""Alerts (issue 36): rules, channels, the outbox and what each condition last said (its
incidents); core.manage_alerts (the console's Alerts page and `manage.py alert`) for the admin
group."""

import uuid
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from core.migrations._permissions import grant_permissions

GRANTS = {"manage_alerts": ("admin",)}


def grant(apps: Any, schema_editor: Any) -> None:
    grant_permissions(apps, GRANTS)


def revoke(apps: Any, schema_editor: Any) -> None:
    Permission = apps.get_model("auth", "Permission")
    Permission.objects.filter(content_type__app_label="core", codename__in=GRANTS).delete()


class Migration(migrations.Migration):
    dependencies = [("core", "0018_datajobs")]

    operations = [
        migrations.CreateModel(
            name='AlertChannel',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100, unique=True)),
                ('kind', models.CharField(choices=[('webhook', 'webhook'), ('slack', 'slack'), ('email', 'email')], max_length=10)),
                ('target', models.CharField(max_length=500)),
                ('secret', models.CharField(blank=True, default='', max_length=200)),
                ('max_per_minute', models.PositiveIntegerField(default=20)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('created_by', models.CharField(default='', max_length=200)),
            ],
        ),
        migrations.CreateModel(
            name='AlertRule',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=100, unique=True)),
                ('condition', models.CharField(max_length=30)),
                ('queue', models.CharField(blank=True, default='', max_length=200)),
                ('handler', models.CharField(blank=True, default='', max_length=200)),
                ('tenant', models.CharField(blank=True, default='', max_length=200)),
                ('job', models.CharField(blank=True, default='', max_length=200)),
                ('threshold', models.FloatField(blank=True, null=True)),
                ('factor', models.FloatField(blank=True, null=True)),
                ('for_s', models.PositiveIntegerField(default=0)),
                ('quiet_s', models.PositiveIntegerField(default=3600)),
                ('max_per_hour', models.PositiveIntegerField(default=20)),
                ('enabled', models.BooleanField(default=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('created_by', models.CharField(default='', max_length=200)),
                ('version', models.PositiveBigIntegerField(default=0)),
                ('cursor', models.BigIntegerField(default=0)),
                ('evaluated_at', models.DateTimeField(blank=True, null=True)),
                ('window_start', models.DateTimeField(blank=True, null=True)),
                ('window_sent', models.PositiveIntegerField(default=0)),
                ('held_back', models.PositiveIntegerField(default=0)),
                ('error', models.TextField(blank=True, default='')),
                ('channels', models.ManyToManyField(related_name='rules', to='core.alertchannel')),
            ],
            options={
                'permissions': [('manage_alerts', 'Can manage alert rules and channels')],
            },
        ),
        migrations.CreateModel(
            name='AlertIncident',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('subject', models.CharField(max_length=400)),
                ('status', models.CharField(choices=[('pending', 'pending'), ('firing', 'firing'), ('resolved', 'resolved')], max_length=10)),
                ('started_at', models.DateTimeField()),
                ('seen_at', models.DateTimeField()),
                ('fired_at', models.DateTimeField(blank=True, null=True)),
                ('resolved_at', models.DateTimeField(blank=True, null=True)),
                ('notified', models.BooleanField(default=False)),
                ('count', models.BigIntegerField(default=0)),
                ('value', models.FloatField(blank=True, null=True)),
                ('summary', models.TextField(default='')),
                ('recovery', models.TextField(blank=True, default='')),
                ('url', models.CharField(blank=True, default='', max_length=500)),
                ('details', models.JSONField(default=dict)),
                ('rule', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='incidents', to='core.alertrule')),
            ],
        ),
        migrations.CreateModel(
            name='AlertMessage',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('key', models.UUIDField(default=uuid.uuid4, editable=False, unique=True)),
                ('channel_name', models.CharField(max_length=100)),
                ('status', models.CharField(choices=[('firing', 'firing'), ('resolved', 'resolved'), ('test', 'test')], max_length=10)),
                ('body', models.JSONField(default=dict)),
                ('delivery', models.CharField(choices=[('pending', 'pending'), ('sending', 'sending'), ('sent', 'sent'), ('failed', 'failed')], default='pending', max_length=10)),
                ('attempts', models.PositiveIntegerField(default=0)),
                ('created_at', models.DateTimeField()),
                ('due_at', models.DateTimeField()),
                ('claim', models.CharField(blank=True, default='', max_length=64)),
                ('claimed_at', models.DateTimeField(blank=True, null=True)),
                ('sent_at', models.DateTimeField(blank=True, null=True)),
                ('response', models.CharField(blank=True, default='', max_length=200)),
                ('error', models.TextField(blank=True, default='')),
                ('channel', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='messages', to='core.alertchannel')),
                ('incident', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='messages', to='core.alertincident')),
                ('rule', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='messages', to='core.alertrule')),
            ],
            options={
                'indexes': [models.Index(fields=['delivery', 'due_at'], name='alert_message_due'), models.Index(fields=['channel', 'sent_at'], name='alert_message_channel'), models.Index(fields=['created_at'], name='alert_message_created')],
            },
        ),
        migrations.AddIndex(
            model_name='alertincident',
            index=models.Index(fields=['status', 'rule'], name='alert_incident_status'),
        ),
        migrations.AddConstraint(
            model_name='alertincident',
            constraint=models.UniqueConstraint(condition=models.Q(('status', 'resolved'), _negated=True), fields=('rule', 'subject'), name='alert_incident_open'),
        ),
        migrations.RunPython(grant, revoke),
    ]

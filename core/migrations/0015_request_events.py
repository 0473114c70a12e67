"""A request's timeline kept by the mirror (issue 33): one RequestEvent row per event of the
request (bounded per request), and on Request the count of its task events kept in its current
run and of those not kept. Requests mirrored before this have no rows: their timeline is what
their Request row recorded (created, finished), as before."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0014_schedule_mirror'),
    ]

    operations = [
        migrations.AddField(
            model_name='request',
            name='events_dropped',
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='request',
            name='task_events',
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name='RequestEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('queue', models.CharField(max_length=200)),
                ('request_id', models.CharField(max_length=200)),
                ('entry_id', models.CharField(max_length=40)),
                ('at_ms', models.BigIntegerField()),
                ('kind', models.CharField(max_length=20)),
                ('task_id', models.CharField(blank=True, default='', max_length=40)),
                ('detail', models.TextField(blank=True, default='')),
            ],
            options={
                'indexes': [models.Index(fields=['queue', 'request_id', 'at_ms'], name='event_request')],
            },
        ),
    ]

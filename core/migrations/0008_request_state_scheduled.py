# A delayed request (Queue.submit(run_at=... | delay=...)) is "scheduled" until due.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0007_admin_unlocks_logins'),
    ]

    operations = [
        migrations.AlterField(
            model_name='request',
            name='state',
            field=models.CharField(choices=[('open', 'open'), ('scheduled', 'scheduled'), ('held', 'held'), ('active', 'active'), ('cancelling', 'cancelling'), ('done', 'done'), ('failed', 'failed'), ('cancelled', 'cancelled')], max_length=12),
        ),
    ]

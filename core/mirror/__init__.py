"""The durable history: each queue's `events` and `dead` streams mirrored into the database
(core.models: Request, DeadLetter, QueueSample, ScheduleRecord) by `manage.py runmirror`.

streams.py reads through a consumer group and trims behind every group; apply.py writes rows
idempotently; fingerprint.py groups dead letters; samples.py keeps the counters behind the
charts; schedules.py the recurring schedules' rows (their history, and what `schedule
restore` declares again); run.py is the loop.
"""

from .run import MirrorConfig, Totals, run_mirror

__all__ = ["MirrorConfig", "Totals", "run_mirror"]

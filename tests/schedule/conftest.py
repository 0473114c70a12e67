"""The schedules' tests (core/queue/schedule): the spec and its policies on a fake clock, the
commands, and the database mirror of the schedules."""

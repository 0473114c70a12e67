"""Alerts (issue 36): the rules' conditions evaluated, and their messages sent, by the services
process (`manage.py runservices`, threads `alerts` and `alerts-send`).

A layer of its own beside core.ops: it reads the engine through core.queue.read, the history
through core.models (dead letters, requests) and the mirror's own figures, and writes only its
own tables (incidents, the outbox). Nothing below imports it; the console, the command line and
the services process above it do. The rules themselves are managed by core.ops.alerts.

look        what one evaluation pass reads, each read once (Finding, Outcome, Unknown)
engine      the conditions read from the engine (workers, waiting work, leases, schedules,
            Redis itself) and the mirror's lag
history     the conditions read from the database (dead letters, data jobs)
evaluate    incidents from what the conditions found: pending, firing, resolved; their
            messages into the outbox, in the same transaction
channels    one message to one channel: a signed webhook, Slack, email
sender      the outbox's delivery: claim, send, retry with backoff, rate limits, order
run         the two loops of the services process
"""

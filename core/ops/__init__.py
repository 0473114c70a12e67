"""The operator actions' service layer: the console's views, the Django admin and the
management commands all act through it. Each action checks the permission (a refusal is
audited), validates its input, acts through the engine's state-checked Lua in chunks of at
most 1,000, and writes one audit entry (`core.models.AuditEntry`).

actions  direct actions on up to 1,000 targets (a page's selection)
bulk     preview (a snapshot of ids), confirm, stop; the runner works through it in chunks
datajobs a data job's submit, cancel and clean; a schedule's run of one (the scheduler's)
audit    the actor, the audit entries and the audit log's pages
perms    which permission each action needs; what a user may do
errors   Refused, StaleState, BadInput (all OpsError)
"""

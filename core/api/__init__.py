"""The HTTP API, /api/v1/ (issue 38, docs/api.md): JSON over the same core/ops services the
console and the command line use, so permissions, validation, audit and messages are the
same everywhere. Like core/views it only parses input, calls a service or a read, and renders
the outcome. django-ninja: typed schemas from type hints (pydantic), the OpenAPI 3 schema made
from them, plain sync Django views.

app       the NinjaAPI: token auth, refusals as JSON (400, 401, 403, 404, 409, 429, 503)
common    what the endpoints share: the caller, queues, the read check, outcomes
schemas   the bodies and answers
requests  submit, a request (and waiting for it), its tasks, results, events; cancel, ...
queues    queues, pause/resume, dead letters, pending entries, workers, handlers' metrics
bulk      bulk actions: preview, confirm by snapshot, stop
history   search, the audit log; schedules
errors    Django's own error answers under /api/ (404, 405, 413, 500) as JSON too
"""

"""The API's bodies and answers (pydantic, through django-ninja's Schema): what the OpenAPI
schema says, and what a body is checked against before an endpoint runs."""

from __future__ import annotations

import datetime as dt
from typing import Any, Literal

from ninja import Field, Schema
from pydantic import ConfigDict

Json = Any  # a task's payload: any JSON value
ID_MAX = 128  # an id or a name the engine keeps (core.queue.keys.validate_id): 1-128 characters


class Body(Schema):
    """A request body: a field it does not define is refused (400), never ignored (a misspelt
    `filters` would cancel every request, a misspelt `dry_run` really clean), and a value is
    taken only as the type the schema says (no "50" for 50, no true for 1, no NaN)."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class SubmitIn(Body):
    handler: str = Field(..., min_length=1, max_length=ID_MAX,
                         description="the handler the workers run each task with")
    tasks: list[Json] = Field(..., min_length=1, max_length=10_000,
                              description="the tasks' payloads, one JSON value each")
    request_id: str | None = Field(None, max_length=ID_MAX,
                                   description="yours, for an idempotent retry; else one is made")
    priority: int | None = Field(None, ge=0, le=99, description="0-99, higher first (50)")
    concurrency: int | None = Field(None, ge=1, le=1_000_000)
    tenant: str | None = Field(None, max_length=ID_MAX)
    max_attempts: int | None = Field(None, ge=1, le=1000)
    lease_ms: int | None = Field(None, ge=100, le=86_400_000)
    retention_ms: int | None = Field(None, ge=1000, le=366 * 86_400_000)
    delay_s: float | None = Field(None, ge=0, le=366 * 86_400,
                                  description="run it this many seconds from now")
    run_at: dt.datetime | None = Field(None, strict=False,  # from its ISO 8601 text
                                       description="run it then (ISO 8601, with offset)")
    any_handler: bool = Field(False, description="accept a handler no live worker announced")


class SubmitOut(Schema):
    request_id: str
    created: bool
    state: str
    total: int
    due_ms: int


class RequestOut(Schema):
    id: str
    queue: str
    state: str
    finished: bool
    priority: int
    concurrency: int
    tenant: str
    handler: str
    total: int
    waiting: int
    leased: int
    delayed: int
    done: int
    dead: int
    cancelled: int
    discarded: int
    max_attempts: int
    created_ms: int
    updated_ms: int
    finished_ms: int | None
    due_ms: int | None
    after: str | None
    then: list[str]
    # The producer's W3C trace context kept with it ("" without one; docs/tracing.md).
    traceparent: str = ""


class Message(Schema):
    message: str


class Invalid(Schema):
    message: str
    errors: list[dict[str, Any]] = []


class ActionOut(Schema):
    action: str
    acted: int
    skipped: int
    message: str
    audit_id: int
    notes: list[str]


class TaskOut(Schema):
    task_id: str
    consumer: str = Field(..., description='a worker, or "~waiting", "~delayed", "~dead"')
    idle_ms: int
    deliveries: int
    lease_expires_ms: int | None
    moves_by_ms: int | None


class TasksOut(Schema):
    tasks: list[TaskOut]
    next: str | None = Field(None, description="pass as ?after= for the next page")


class ResultsOut(Schema):
    results: dict[str, Json]
    cursor: int = Field(..., description="pass as ?cursor= for the next page; 0: the last")
    total: int


class EventOut(Schema):
    at_ms: int
    kind: str
    task_id: str
    detail: dict[str, Any]


class IdsIn(Body):
    ids: list[str] = Field(..., min_length=1, max_length=1000)


class PendingRefIn(Body):
    request_id: str = Field(..., max_length=ID_MAX)
    task_id: str = Field(..., max_length=40)
    consumer: str = Field(..., max_length=ID_MAX, description="the holder you saw")
    idle_ms: int = Field(0, ge=0, le=2**53, description="the idle time you saw")


class ClaimIn(Body):
    entries: list[PendingRefIn] = Field(..., min_length=1, max_length=1000)
    to: str = Field(..., max_length=ID_MAX, description="a live worker of the queue")


class ReleaseIn(Body):
    entries: list[PendingRefIn] = Field(..., min_length=1, max_length=1000)


class DeadLetterOut(Schema):
    id: str
    request_id: str
    task_id: str
    payload: str
    error: str
    attempts: int
    worker: str
    ts_ms: int
    handler: str
    tenant: str


class BulkIn(Body):
    action: Literal["requeue", "delete", "cancel"]
    filters: dict[str, str] = Field(default_factory=dict, description=(
        "requeue/delete: handler, tenant, request, fingerprint, since, until; cancel: state, "
        "tenant, priority, handler, since, until, id"))


class BulkConfirmIn(Body):
    count: int | None = Field(None, ge=0, le=10_000_000,
                              description="the preview's count: needed over 1,000 targets; "
                                          "one given must be it (else a 400)")
    rate_per_s: int | None = Field(None, ge=1, le=100_000)


class BulkOut(Schema):
    id: int
    action: str
    queue: str
    description: str
    count: int
    status: str
    acted: int
    skipped: int
    error: str
    position: int

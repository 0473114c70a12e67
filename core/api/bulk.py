"""Bulk actions, as the console does them: a preview stores the snapshot of the ids a filter
matches now; a confirm (the count typed above 1,000 targets) starts the runner on exactly that
snapshot; a stop ends it after its current chunk (core.ops.bulk)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router, Status

from core.models import BulkAction
from core.ops import bulk
from core.ops.errors import NotFound

from .common import actor, reader
from .requests import REFUSALS
from .schemas import BulkConfirmIn, BulkIn, BulkOut

router = Router(tags=["bulk actions"])


def bulk_out(b: BulkAction) -> dict[str, Any]:
    return {"id": b.pk, "action": b.action, "queue": b.queue, "description": b.description,
            "count": b.count, "status": b.status, "acted": b.acted, "skipped": b.skipped,
            "error": b.error, "position": b.position}


@router.post("/queues/{queue}/bulk", response={201: BulkOut, **REFUSALS},
             summary="Preview a bulk requeue, delete (dead letters) or cancel (requests)")
def preview(request: HttpRequest, queue: str, body: BulkIn) -> Any:
    """Nothing is done yet: the snapshot of the matching ids is stored, with its count.
    Confirm it with POST /bulk/{id}/confirm."""
    return Status(201, bulk_out(bulk.preview(actor(request), body.action, queue, body.filters)))


@router.get("/bulk/{bulk_id}", response={200: BulkOut, **REFUSALS},
            summary="A bulk action's status and progress")
def show(request: HttpRequest, bulk_id: int) -> Any:
    reader(request)
    try:
        return bulk_out(bulk.get(bulk_id))
    except BulkAction.DoesNotExist:
        raise NotFound(f"there is no bulk action {bulk_id}") from None


@router.post("/bulk/{bulk_id}/confirm", response={200: BulkOut, **REFUSALS},
             summary="Start a previewed bulk action on its snapshot")
def confirm(request: HttpRequest, bulk_id: int, body: BulkConfirmIn) -> Any:
    typed = None if body.count is None else str(body.count)
    return bulk_out(bulk.confirm(actor(request), bulk_id, typed, body.rate_per_s))


@router.post("/bulk/{bulk_id}/stop", response={200: BulkOut, **REFUSALS},
             summary="Stop a bulk action after the chunk it is on")
def stop(request: HttpRequest, bulk_id: int) -> Any:
    return bulk_out(bulk.stop(actor(request), bulk_id))

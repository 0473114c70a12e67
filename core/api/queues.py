"""Queues: their figures, pause and resume; their dead letters (requeue, delete) and pending
entries (claim, release); their workers (quiet, stop, resume) and handlers' metrics."""

from __future__ import annotations

from typing import Any, Literal

from django.conf import settings
from django.http import HttpRequest
from ninja import Router
from ninja.params.functions import Query

from core.conf import redis_client
from core.models import HandlerTotal
from core.ops import actions, workers
from core.ops.actions import PendingRef
from core.queue import read

from .common import actor, known_queue, outcome, reader, valid_id
from .requests import REFUSALS, valid_task
from .schemas import ActionOut, ClaimIn, DeadLetterOut, IdsIn, ReleaseIn

router = Router(tags=["queues"])


@router.get("/queues", response={200: list[str], **REFUSALS}, summary="The queues there are")
def list_queues(request: HttpRequest) -> Any:
    reader(request)
    return read.queues(redis_client(), prefix=settings.QUEUE_PREFIX)


@router.get("/queues/{queue}", response={200: dict[str, Any], **REFUSALS},
            summary="A queue's figures: waiting, leased, delayed, dead, workers, paused")
def queue_stats(request: HttpRequest, queue: str) -> Any:
    reader(request)
    st = read.stats(known_queue(queue))
    return {"queue": st.queue, "waiting": st.waiting, "leased": st.leased,
            "delayed": st.delayed, "dead": st.dead, "scheduled": st.scheduled,
            "workers": st.workers, "paused": st.paused,
            "requests_by_state": st.requests_by_state,
            "waiting_by_priority": {str(k): v for k, v in st.waiting_by_priority.items()},
            "waiting_by_handler": st.waiting_by_handler, "totals": st.totals,
            "handlers_run": sorted(st.handlers_run)}


@router.post("/queues/{queue}/pause", response={200: ActionOut, **REFUSALS},
             summary="Pause a queue: workers lease nothing from it (admin)")
def pause(request: HttpRequest, queue: str) -> Any:
    return outcome(actions.pause(actor(request), queue))


@router.post("/queues/{queue}/resume", response={200: ActionOut, **REFUSALS},
             summary="Resume a paused queue (admin)")
def resume(request: HttpRequest, queue: str) -> Any:
    return outcome(actions.resume(actor(request), queue))


@router.get("/queues/{queue}/dead", response={200: list[DeadLetterOut], **REFUSALS},
            summary="Dead letters, newest first (page with ?before=<the last id>)")
def dead_letters(request: HttpRequest, queue: str,
                 before: str | None = Query(None, max_length=40),
                 count: int = Query(50, ge=1, le=1000)) -> Any:
    reader(request)
    q = known_queue(queue)
    if before is not None:
        valid_task(before)
    return [{"id": d.id, "request_id": d.request_id, "task_id": d.task_id,
             "payload": d.payload, "error": d.error, "attempts": d.attempts,
             "worker": d.worker, "ts_ms": d.ts_ms, "handler": d.handler, "tenant": d.tenant}
            for d in read.dead_letters(q, before=before, count=count)]


@router.post("/queues/{queue}/dead/requeue", response={200: ActionOut, **REFUSALS},
             summary="Requeue dead letters by id, up to 1,000 (operate)")
def requeue_dead(request: HttpRequest, queue: str, body: IdsIn) -> Any:
    return outcome(actions.requeue_dead(actor(request), queue, body.ids))


@router.post("/queues/{queue}/dead/delete", response={200: ActionOut, **REFUSALS},
             summary="Delete dead letters by id, up to 1,000 (admin)")
def delete_dead(request: HttpRequest, queue: str, body: IdsIn) -> Any:
    return outcome(actions.delete_dead(actor(request), queue, body.ids))


def _refs(body: ReleaseIn | ClaimIn) -> list[PendingRef]:
    return [PendingRef(e.request_id, e.task_id, e.consumer, e.idle_ms) for e in body.entries]


@router.post("/queues/{queue}/pending/claim", response={200: ActionOut, **REFUSALS},
             summary="Move leased tasks to another live worker (operate)")
def claim(request: HttpRequest, queue: str, body: ClaimIn) -> Any:
    """Each entry as you saw it (holder, idle time): one that changed hands since is
    skipped."""
    return outcome(actions.claim(actor(request), queue, _refs(body), body.to))


@router.post("/queues/{queue}/pending/release", response={200: ActionOut, **REFUSALS},
             summary="Leased tasks back to waiting, no attempt spent (operate)")
def release(request: HttpRequest, queue: str, body: ReleaseIn) -> Any:
    return outcome(actions.release(actor(request), queue, _refs(body)))


@router.get("/queues/{queue}/workers", response={200: list[dict[str, Any]], **REFUSALS},
            summary="A queue's workers and their last heartbeat")
def list_workers(request: HttpRequest, queue: str,
                 count: int = Query(50, ge=1, le=1000)) -> Any:
    reader(request)
    page = read.workers(known_queue(queue), limit=count)
    return [{"name": w.name, "last_beat_ms": w.last_beat_ms, "control": w.control,
             "info": w.info} for w in page.items]


@router.post("/workers/{worker}/{command}", response={200: ActionOut, **REFUSALS},
             summary="Ask a worker to quiet, stop or resume (admin)")
def control_worker(request: HttpRequest, worker: str,
                   command: Literal["quiet", "stop", "resume"],
                   queue: str | None = Query(None, max_length=200)) -> Any:
    valid_id(worker, "worker name")
    return outcome(workers.control(actor(request), command, worker, queue=queue))


@router.post("/queues/{queue}/workers/{worker}/reclaim", response={200: ActionOut, **REFUSALS},
             summary="Every lease of a worker past its --dead-after back to waiting (operate)")
def reclaim(request: HttpRequest, queue: str, worker: str) -> Any:
    """Refused (409) while it beats within its --dead-after: it may still be running them."""
    return outcome(actions.reclaim_worker(actor(request), queue, worker))


@router.get("/queues/{queue}/handlers", response={200: list[dict[str, Any]], **REFUSALS},
            summary="Each handler's counts since the history began (done, failed, retried, "
                    "run time)")
def handler_metrics(request: HttpRequest, queue: str) -> Any:
    reader(request)
    valid_id(queue, "queue name")
    return [{"handler": t.handler, "done": t.done, "failed": t.failed, "retried": t.retried,
             "run_s": t.run_us / 1e6, "fail_s": t.fail_us / 1e6}
            for t in HandlerTotal.objects.filter(queue=queue).order_by("handler")]

"""A request's events kept in the database (issue 33, item 8): every event of it, in the order
the engine wrote them, after the capped `events` stream has lost them; retries and releases
among them; a bounded number of single tasks' events per run of the request."""

from __future__ import annotations

from typing import Any

import pytest

from core.mirror import events as kept_events
from core.models import Request, RequestEvent
from core.queue import Queue
from tests.mirror_support import mirror

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning"),
]


def kinds(rid: str) -> list[tuple[str, str]]:
    rows = kept_events.in_order(list(RequestEvent.objects.filter(queue="q", request_id=rid)))
    return [(e.kind, e.task_id) for e in rows]


def test_every_event_of_a_request_is_kept_in_order_after_the_stream_lost_them(
    queue: Queue, redis_client: Any
) -> None:
    rid = queue.submit([{"row": 1}], request_id="r1", handler="h", max_attempts=2,
                       backoff_ms=0).request_id
    [lease] = queue.dequeue("w1", 1)
    task = lease.task_id
    assert queue.fail(lease, "ValueError: row 1", worker="w1").outcome == "waiting"  # a retry
    mirror(queue)
    [lease] = queue.dequeue("w2", 1)
    assert queue.release([lease]) == [1]  # its worker gave it back (shutting down)
    [lease] = queue.dequeue("w1", 1)
    assert queue.fail(lease, "ValueError: row 1", worker="w1").outcome == "dead"
    mirror(queue)
    assert queue.requeue_request(rid) == 1  # reopened
    [lease] = queue.dequeue("w1", 1)
    queue.fail(lease, "ValueError: row 1 again", worker="w1")  # its attempts were reset: a retry
    [lease] = queue.dequeue("w1", 1)
    queue.fail(lease, "ValueError: row 1 again", worker="w1")
    mirror(queue)
    redis_client.xtrim(queue.keys.events, maxlen=0)  # the stream forgets them all

    assert kinds(rid) == [
        ("submitted", ""), ("retried", task), ("released", task), ("dead", task),
        ("completed", ""), ("reopened", ""), ("requeued", ""), ("retried", task),
        ("dead", task), ("completed", ""),
    ]
    rows = kept_events.in_order(list(RequestEvent.objects.filter(request_id=rid)))
    completed = [e.detail for e in rows if e.kind == "completed"]
    assert completed == ['{"state":"failed","done":"0","dead":"1","cancelled":"0"}'] * 2
    retried = next(e for e in rows if e.kind == "retried")
    assert '"attempt":"1"' in retried.detail and '"worker":"w1"' in retried.detail
    assert next(e for e in rows if e.kind == "released").detail == '{"worker":"w2","by":"worker"}'
    # Mirrored again (a replay after a crash), nothing is written twice.
    redis_client.xgroup_setid(queue.keys.events, "mirror", "0")
    mirror(queue)
    assert len(kinds(rid)) == 10


def test_task_events_are_kept_up_to_a_bound_per_run_and_the_rest_counted(
    queue: Queue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kept_events, "TASK_EVENTS_KEPT", 3)
    rid = queue.submit([{"row": i} for i in range(5)], request_id="big", handler="h",
                       max_attempts=1).request_id
    for lease in queue.dequeue("w1", 5):
        queue.fail(lease, "ValueError: bad row", worker="w1")
    mirror(queue)
    assert [k for k, _ in kinds(rid)] == ["submitted", "dead", "dead", "dead", "completed"]
    row = Request.objects.get(request_id=rid)
    assert (row.task_events, row.events_dropped) == (3, 2)
    # Requeued, the request runs again: its new run's task events are kept again.
    queue.requeue_request(rid)
    for lease in queue.dequeue("w1", 5):
        queue.ack(lease)
    mirror(queue)
    row = Request.objects.get(request_id=rid)
    assert [k for k, _ in kinds(rid)][5:] == ["reopened", "requeued", "completed"]
    assert (row.task_events, row.events_dropped, row.state) == (0, 2, "done")

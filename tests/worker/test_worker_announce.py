"""Workers announce the handlers they run, per queue, before they take work (issue 6, item
9), so that `manage.py submit` can refuse a handler nobody runs."""

from __future__ import annotations

import redis
from django.core.management import call_command

from core.queue import Queue, handlers


def test_runworker_announces_its_handlers_on_each_of_its_queues(
    django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    before = django_queue.now_ms()
    call_command("runworker", "--burst", "-q", "default", "-q", "batch", "--import",
                 "tests.handlers", "--name", "w-announce", "--heartbeat", "thread")

    for name in ("default", "batch"):
        offered = handlers.known(Queue(redis_client, name, prefix=prefix))
        assert {"noop", "echo", "sleep", "fail", "pause", "tracked"} <= set(offered)
        assert {o.worker for o in offered.values()} == {"w-announce"}
        assert all(o.announced_ms >= before for o in offered.values())

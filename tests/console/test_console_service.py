"""/metrics, /healthz, createuser, and the cache that keeps many tabs from multiplying Redis
reads."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from core.queue import Queue
from core.queue.schedule.store import Schedules
from core.stack.redis_server import free_port
from tests.console_support import Seeded

pytestmark = pytest.mark.django_db


def test_metrics_is_off_without_a_token(client: Client, console: Queue, settings: Any) -> None:
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 404
    assert client.get("/metrics", headers={"Authorization": "Bearer "}).status_code == 404


def test_metrics_needs_the_bearer_token(client: Client, seeded: Seeded, settings: Any) -> None:
    settings.METRICS_TOKEN = "s3cret-token"
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 403
    response = client.get("/metrics", headers={"Authorization": "Bearer s3cret-token"})
    assert response.status_code == 200
    text = response.content.decode()
    assert 'queueadmin_waiting_tasks{priority="70",queue="default"} 4.0' in text
    assert 'queueadmin_leased_tasks{queue="default"} 1.0' in text
    assert 'queueadmin_dead_letters{queue="default"} 1.0' in text
    assert 'queueadmin_workers{queue="default",state="live"} 1.0' in text
    assert 'queueadmin_requests{queue="default",state="active"} 1.0' in text
    assert 'queueadmin_tasks_total{outcome="submitted",queue="default"} 6.0' in text
    assert "queueadmin_redis_up 1.0" in text


def test_metrics_count_delayed_requests_and_schedules(client: Client, console: Queue,
                                                      settings: Any) -> None:
    """Delayed requests per queue (and those due within the hour), and the recurring
    schedules per queue: active, paused, ended."""
    from core.conf import get_queue
    from core.queue.schedule.api import declare, every

    settings.METRICS_TOKEN = "t"
    console.submit([1], handler="echo", delay=600)
    console.submit([1], handler="echo", delay=3 * 3600)
    console.submit([1], handler="echo", delay=5, request_id="soon")
    console.submit([1], handler="echo")  # not delayed
    now = console.now_ms()
    declare(console, every("a", "1h", handler="echo", tasks=[{}]),
            every("b", "10m", handler="echo", tasks=[{}]),
            every("c", "1h", handler="echo", tasks=[{}]),
            every("over", "1h", handler="echo", tasks=[{}], start_ms=now - 7_200_000,
                  end_ms=now - 3_600_000))
    Schedules(console).pause("c")
    declare(get_queue("other"), every("x", "1h", handler="echo", tasks=[{}]))

    text = client.get("/metrics", headers={"Authorization": "Bearer t"}).content.decode()
    assert 'queueadmin_scheduled_requests{queue="default"} 3.0' in text
    assert 'queueadmin_requests{queue="default",state="scheduled"} 3.0' in text
    assert 'queueadmin_scheduled_due_next_hour{queue="default"} 2.0' in text
    assert 'queueadmin_scheduled_requests{queue="other"} 0.0' in text
    assert 'queueadmin_schedules{queue="default",status="active"} 2.0' in text
    assert 'queueadmin_schedules{queue="default",status="paused"} 1.0' in text
    assert 'queueadmin_schedules{queue="default",status="ended"} 1.0' in text
    assert 'queueadmin_schedules{queue="other",status="active"} 1.0' in text
    assert 'queueadmin_schedules{queue="other",status="paused"} 0.0' in text
    # Run now: the request is due, no longer counted.
    rid = Schedules(console).run_now("a")
    assert console.state(rid) == "active"
    assert console.run_now("soon") == ("active", True)
    text = client.get("/metrics", headers={"Authorization": "Bearer t"}).content.decode()
    assert 'queueadmin_scheduled_requests{queue="default"} 2.0' in text


def test_metrics_says_redis_is_down(client: Client, console: Queue, settings: Any) -> None:
    settings.METRICS_TOKEN = "t"
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = client.get("/metrics", headers={"Authorization": "Bearer t"})
    assert response.status_code == 200
    assert "queueadmin_redis_up 0.0" in response.content.decode()


def test_healthz_is_public_and_says_what_answers(
    client: Client, console: Queue, settings: Any
) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"healthy": True, "redis": "ok", "database": "ok"}
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json()["redis"].startswith("error") and response.json()["database"] == "ok"


def test_createuser_prints_a_password_once_and_the_user_can_log_in(
    client: Client, groups: None
) -> None:
    out = StringIO()
    call_command("createuser", "ana", "--role", "viewer", stdout=out)
    password = out.getvalue().strip().rsplit(" ", 1)[-1]
    user = User.objects.get(username="ana")
    assert user.has_perm("core.view_console") and not user.is_staff
    assert [g.name for g in user.groups.all()] == ["viewer"]
    assert client.login(username="ana", password=password)
    call_command("createuser", "olaf", "--role", "operator", stdout=StringIO())
    assert User.objects.get(username="olaf").groups.get().name == "operator"


def test_createuser_refuses_clearly(groups: None) -> None:
    call_command("createuser", "ana", "--role", "viewer", stdout=StringIO())
    with pytest.raises(CommandError, match="already exists"):
        call_command("createuser", "ana", "--role", "viewer", stdout=StringIO())
    with pytest.raises(CommandError, match="invalid choice: 'root'"):  # admin is a role now
        call_command("createuser", "bob", "--role", "root", stdout=StringIO())
    assert not User.objects.filter(username="bob").exists()


def test_createuser_says_when_the_groups_are_missing(db: Any) -> None:
    from django.contrib.auth.models import Group

    Group.objects.filter(name="viewer").delete()
    with pytest.raises(CommandError, match="the viewer group is missing"):
        call_command("createuser", "cy", "--role", "viewer", stdout=StringIO())


def test_many_tabs_cost_redis_one_read_per_second(
    viewer: Client, seeded: Seeded, settings: Any, console: Queue
) -> None:
    from django.core.cache import cache

    settings.CONSOLE_CACHE_S = 30
    cache.clear()
    viewer.get("/")

    def calls() -> int:
        stats = console.redis.info("commandstats")
        return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")

    before = calls()
    poll = {"HX-Request": "true", "HX-Target": "live"}
    for _ in range(5):
        assert viewer.get("/", headers=poll).status_code == 200
    assert calls() - before == 0  # every aggregate of the overview came from the cache
    cache.clear()


def test_metrics_count_the_waiting_tasks_no_live_worker_runs(client: Client, console: Queue,
                                                             settings: Any) -> None:
    """Issue 33: a task whose handler no live worker runs waits (it is never leased to a
    worker that would fail it); /metrics counts them per queue and handler."""
    from core.queue import handlers

    settings.METRICS_TOKEN = "t"
    handlers.announce(console, "w1", ["echo"])
    console.submit([1, 2, 3], handler="resize")
    console.submit([1], handler="echo")
    text = client.get("/metrics", headers={"Authorization": "Bearer t"}).content.decode()
    assert 'queueadmin_tasks_waiting_no_worker{handler="resize",queue="default"} 3.0' in text
    assert 'handler="echo"' not in text.split("queueadmin_tasks_waiting_no_worker")[-1]

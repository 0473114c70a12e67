"""`manage.py queuestat`: what an operator reads, as a table and as JSON."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError

from core.cli.queuestat import queuestat
from core.cli.submit import submit
from core.queue import Queue
from core.stack.redis_server import free_port

Stat = Callable[..., str]


def via_command(*queues: str, as_json: bool = False) -> str:
    out = io.StringIO()
    call_command("queuestat", *[a for q in queues for a in ("--queue", q)],
                 *(["--json"] if as_json else []), stdout=out)
    return out.getvalue()


def via_function(*queues: str, as_json: bool = False) -> str:
    out = io.StringIO()
    queuestat(list(queues), as_json=as_json, stdout=out)
    return out.getvalue()


@pytest.fixture(params=["command", "function"])
def run_stat(request: pytest.FixtureRequest) -> Stat:
    return via_command if request.param == "command" else via_function


def _submit(*tasks: str, **options: Any) -> None:
    submit(list(tasks), handler="noop", any_handler=True, stdout=io.StringIO(),
           stderr=io.StringIO(), **options)


def test_json_reflects_a_submitted_request(run_stat: Stat, django_queue: Queue) -> None:
    _submit("1", "2", "3", priority=70, request_id="r1")

    [stats] = json.loads(run_stat(as_json=True))["queues"]

    assert stats["queue"] == "default"
    assert stats["waiting"] == 3
    assert stats["waiting_by_priority"] == {"70": 3}
    assert (stats["leased"], stats["delayed"], stats["dead"]) == (0, 0, 0)
    assert stats["requests"]["active"] == 1
    assert stats["totals"]["submitted"] == 3


def test_json_follows_tasks_through_leased_and_dead(run_stat: Stat, django_queue: Queue) -> None:
    _submit("1", "2", "3", request_id="r1")
    first, second = django_queue.dequeue("w", 2)
    django_queue.fail(second, "boom", retry=False)
    django_queue.heartbeat("w", {"host": "h"}, [first])

    [stats] = json.loads(run_stat(as_json=True))["queues"]

    assert (stats["waiting"], stats["leased"], stats["dead"]) == (1, 1, 1)
    assert stats["workers"] == 1
    assert stats["totals"]["failed"] == 1


def test_several_queues_in_the_order_given(
    run_stat: Stat, django_queue: Queue, redis_client: redis.Redis, prefix: str
) -> None:
    _submit("1", "2", queue="batch")
    _submit("1", priority=90)

    stats = json.loads(run_stat("batch", "default", "batch", as_json=True))["queues"]

    assert [(s["queue"], s["waiting"]) for s in stats] == [("batch", 2), ("default", 1)]
    assert stats[1]["waiting_by_priority"] == {"90": 1}


def test_a_queue_nobody_used_is_shown_with_a_warning_that_says_so(
    run_stat: Stat, django_queue: Queue, capsys: pytest.CaptureFixture[str]
) -> None:
    _submit("1", queue="batch")
    stats = json.loads(run_stat("batchh", as_json=True))["queues"]  # a typo
    assert stats[0]["waiting"] == 0  # a script polling a queue before its first use: figures
    said = capsys.readouterr().err
    assert "no producer or worker has used 'batchh' yet" in said and "batch" in said
    json.loads(run_stat("batch", as_json=True))
    assert "no producer" not in capsys.readouterr().err


def test_table_shows_depths_per_queue(run_stat: Stat, django_queue: Queue) -> None:
    _submit("1", "2", "3", priority=70)
    _submit("1", queue="other")

    table = run_stat("default", "other")

    def cells(label: str) -> list[str]:
        line = next(line for line in table.splitlines() if f"│ {label} " in line)
        return [c.strip() for c in line.split("│")[2:-1]]

    header = next(line for line in table.splitlines() if "default" in line)
    assert header.index("default") < header.index("other")
    assert cells("waiting") == ["3", "1"]
    assert cells("  priority 70") == ["3", "0"]
    assert cells("  priority 50") == ["0", "1"]
    assert cells("requests active") == ["1", "1"]
    assert cells("dead letters") == ["0", "0"]
    # No worker runs "noop" here: its waiting tasks are counted as such (issue 33).
    assert cells("  no live worker runs noop") == ["3", "1"]


def test_json_names_the_waiting_work_no_live_worker_runs(
    run_stat: Stat, django_queue: Queue
) -> None:
    from core.queue import handlers

    handlers.announce(django_queue, "w1", ["echo"])
    _submit("1", "2")
    submit(["1"], handler="echo", stdout=io.StringIO(), stderr=io.StringIO())
    [stats] = json.loads(run_stat(as_json=True))["queues"]
    assert stats["waiting_by_handler"] == {"echo": 1, "noop": 2}
    assert stats["waiting_no_worker"] == {"noop": 2}


def test_unreachable_redis_is_a_command_error(
    run_stat: Stat, django_queue: Queue, settings: Any
) -> None:
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    with pytest.raises(CommandError, match=r"cannot reach Redis at redis://127\.0\.0\.1:\d+/0"):
        run_stat()


def test_a_bad_queue_name_is_a_command_error(run_stat: Stat, django_queue: Queue) -> None:
    with pytest.raises(CommandError, match=r"invalid queue name '\{x\}'"):
        run_stat("{x}")

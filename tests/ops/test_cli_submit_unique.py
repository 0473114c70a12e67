"""`manage.py submit --resource R --unique-key K [--unique-scope ...] [--on-duplicate ...]`
(issue 37): a request declares the resources its tasks use; a second submit of a key its
holder still holds creates nothing, prints the holder's id and says so on stderr."""

from __future__ import annotations

import io
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError

from core.queue import Queue, handlers, read


@pytest.fixture(autouse=True)
def workers_announced(redis_client: redis.Redis, prefix: str) -> None:
    handlers.announce(Queue(redis_client, "default", prefix=prefix), "w1", ["noop"])


def submit(*tasks: str, **options: Any) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("submit", *tasks, handler="noop", stdout=out, stderr=err, **options)
    return out.getvalue(), err.getvalue()


def test_resources_are_declared_and_their_limits_apply(django_queue: Queue) -> None:
    django_queue.set_limit("db", on="resource", value="warehouse", concurrency=1)
    out, err = submit("1", "2", resource=["warehouse", "api"])
    rid = out.strip()
    info = read.request(django_queue, rid)
    assert info is not None and info.resources == ("api", "warehouse") and err == ""
    assert len(django_queue.dequeue("w", 10)) == 1


def test_a_duplicate_prints_the_holder_and_says_so(django_queue: Queue) -> None:
    first, err = submit('{"order": 42}', unique_key="order-42")
    assert err == ""
    again, err = submit('{"order": 42}', unique_key="order-42")
    assert again == first
    assert err.startswith(f"duplicate: request {first.strip()} holds unique key 'order-42'")
    assert "nothing new was submitted" in err
    assert read.stats(django_queue).totals.get("duplicates") == 1
    info = read.request(django_queue, first.strip())
    assert info is not None and (info.unique_key, info.unique_scope) == ("order-42", "active")


def test_replace_and_scope_reach_the_engine(django_queue: Queue) -> None:
    first, _ = submit("1", unique_key="k", unique_scope="waiting")
    again, err = submit("2", "3", unique_key="k", unique_scope="waiting", on_duplicate="replace")
    assert again == first and "replaced" in err
    info = read.request(django_queue, first.strip())
    assert info is not None and info.total == 2 and info.unique_scope == "waiting"
    django_queue.dequeue("w", 1)  # started: a waiting scope lets go
    third, err = submit("4", unique_key="k", unique_scope="waiting")
    assert third != first and err == ""


def test_debounce_pushes_the_due_time(django_queue: Queue) -> None:
    first, _ = submit("1", unique_key="d", on_duplicate="delay", due_in="10s")
    due = read.request(django_queue, first.strip()).due_ms  # type: ignore[union-attr]
    again, err = submit("1", unique_key="d", on_duplicate="delay", due_in="1h")
    assert again == first and "due time was moved" in err
    assert read.request(django_queue, first.strip()).due_ms > due + 3_000_000  # type: ignore


@pytest.mark.parametrize(("options", "says"), [
    ({"unique_key": "a b"}, "invalid unique key"),
    ({"unique_key": "k", "unique_scope": "forever"}, r"waiting, active or done\+DURATION"),
    ({"unique_key": "k", "unique_scope": "done+soon"}, "not a duration"),
    ({"unique_scope": "waiting"}, "go with --unique-key"),
    ({"resource": ["no way"]}, "resource name"),
])
def test_bad_options_exit_2_with_a_message(django_queue: Queue, options: dict[str, Any],
                                           says: str) -> None:
    with pytest.raises(CommandError, match=says) as info:
        submit("1", **options)
    assert info.value.returncode == 2
    assert read.stats(django_queue).totals.get("submitted", 0) == 0

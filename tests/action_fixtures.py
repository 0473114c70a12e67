"""What the console's action tests share besides their fixtures (`world` in tests/conftest.py):
what `world` made, dead letters made by failing tasks, and reading a page's form and the
queue's counts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from core.queue import Queue


@dataclass
class World:
    q: Queue
    failed: str  # a failed request with three dead letters
    dead_ids: list[str]  # their dead-stream ids, oldest first
    fingerprint: str
    running: str  # an active request: task 0 leased to the live worker w-live, 1 to w-stale
    live_task: str
    stale_task: str


def fail_tasks(q: Queue, rid: str, n: int, worker: str = "w-fail") -> None:
    """Lease and fail the request's next n tasks (max_attempts 1: each goes dead)."""
    done = 0
    while done < n:
        leases = q.dequeue(worker, min(100, n - done))
        assert leases, f"only {done} of {n} tasks could be leased"
        for lease in leases:
            q.fail(lease, f"ValueError: bad row {done}", "Traceback ...", worker=worker)
            done += 1


def field(html: str, name: str) -> str:
    """The value of the first hidden input `name` of a page (the form's nonce, next...)."""
    m = re.search(rf'name="{re.escape(name)}" value="([^"]*)"', html)
    assert m, f"no input {name!r} on the page"
    return m.group(1)


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def has_action_buttons(html: str) -> bool:
    return bool(re.search(r'(formaction|action)="/actions/', html))


def stats(q: Queue) -> Any:
    from core.queue import introspect

    return introspect.stats(q)

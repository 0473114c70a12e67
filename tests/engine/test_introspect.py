"""Paging the console's views by (score, member), and pruning the worker registry (issue 6,
item 10): a full walk sees every row once, however many share one millisecond."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from core.queue import InvalidInput, Queue, read
from core.queue.models import Page, PageCursor
from core.queue.prune import WORKER_RETENTION_MS, prune_workers
from tests.conftest import FakeClock

pytestmark = pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning")


def walk(fetch: Any, limit: int) -> list[Any]:
    """Every row of a paged view, following its cursors to the end."""
    rows: list[Any] = []
    cursor: PageCursor | None = None
    for _ in range(100_000):
        page: Page[Any] = fetch(after=cursor, limit=limit)
        assert len(page.items) <= limit
        rows += page.items
        if page.cursor is None:
            return rows
        cursor = PageCursor.parse(str(page.cursor))  # as it would come back from a URL
    raise AssertionError("the walk does not end")


def test_a_full_walk_sees_every_request_once_when_thousands_enter_a_state_in_one_ms(
    queue: Queue, clock: FakeClock
) -> None:
    # 10,001 requests entering "active" in three milliseconds: paging by score alone skipped
    # every request after a page boundary that shared its millisecond.
    ids = []
    for i in range(10_001):
        if i % 4000 == 0:
            clock.advance(1)
        ids.append(f"r{i:05d}")
        queue.submit([1], request_id=ids[-1], handler="echo")

    for limit in (50, 333):
        seen = walk(lambda **kw: read.requests(queue, "active", **kw), limit)
        assert len(seen) == 10_001
        assert sorted(r.id for r in seen) == ids
        keys = [(r.updated_ms, r.id) for r in seen]
        assert keys == sorted(keys, reverse=True)  # newest first, then by id


def test_a_walk_goes_on_when_the_request_under_its_cursor_leaves_the_state(
    queue: Queue, clock: FakeClock
) -> None:
    clock.advance(1)
    for i in range(10):
        queue.submit([1], request_id=f"r{i}", handler="echo")
    clock.advance(1)
    queue.submit([1], request_id="newer", handler="echo")

    first = read.requests(queue, "active", limit=4)
    assert [r.id for r in first.items] == ["newer", "r9", "r8", "r7"]
    queue.cancel("r7")  # the cursor's request leaves "active"
    queue.cancel("r5")  # and one further on
    rest = walk(
        lambda after, limit: read.requests(queue, "active", after=after or first.cursor,
                                           limit=limit),
        3,
    )
    assert [r.id for r in rest] == ["r6", "r4", "r3", "r2", "r1", "r0"]


def test_a_request_that_reenters_the_state_is_not_seen_twice(
    queue: Queue, clock: FakeClock
) -> None:
    clock.advance(1)
    for i in range(6):
        queue.submit([1], request_id=f"r{i}", handler="echo")
    first = read.requests(queue, "active", limit=3)
    assert [r.id for r in first.items] == ["r5", "r4", "r3"]
    # r3 re-enters "active" later (a newer score): the walk goes on after its old place.
    clock.advance(5)
    queue.redis.zadd(queue.keys.state_index("active"), {"r3": clock.now})
    rest = read.requests(queue, "active", after=first.cursor, limit=10)
    assert [r.id for r in rest.items] == ["r2", "r1", "r0"]
    assert rest.cursor is None


def test_workers_are_paged_most_recent_beat_first_with_ties_broken_by_name(
    queue: Queue, clock: FakeClock
) -> None:
    names = []
    for i in range(120):
        if i % 40 == 0:
            clock.advance(1)
        names.append(f"w{i:03d}")
        queue.heartbeat(names[-1], {"n": i})

    seen = walk(lambda **kw: read.workers(queue, **kw), 7)
    assert sorted(w.name for w in seen) == names
    assert [(w.last_beat_ms, w.name) for w in seen] == sorted(
        ((w.last_beat_ms, w.name) for w in seen), reverse=True
    )
    assert seen[0].info == {"n": 119}
    page = read.workers(queue, limit=5)
    assert [w.name for w in page.items] == ["w119", "w118", "w117", "w116", "w115"]
    assert page.cursor == PageCursor(clock.now, "w115")


@pytest.mark.parametrize("limit", [0, 1001, "5"])
def test_a_page_size_out_of_range_is_refused(queue: Queue, limit: object) -> None:
    with pytest.raises(InvalidInput, match="limit must"):
        read.workers(queue, limit=limit)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="limit must"):
        read.requests(queue, "active", limit=limit)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text", ["", "12", ":r1", "x:r1", "12:a:b", "12:a b", "-1:r", "1" * 21 + ":r"]
)
def test_a_cursor_from_a_hand_edited_url_is_invalid_input(text: str) -> None:
    with pytest.raises(InvalidInput, match="invalid page cursor"):
        PageCursor.parse(text)


def test_a_cursor_round_trips_through_its_text() -> None:
    cursor = PageCursor(1_700_000_000_123, "req-1.a@b=c+d")
    assert PageCursor.parse(str(cursor)) == cursor


def test_prune_removes_workers_gone_longer_than_the_retention_and_keeps_the_rest(
    queue: Queue, redis_client: redis.Redis, clock: FakeClock
) -> None:
    # 30,000 workers that were SIGKILLed long ago: their info hashes expired, their registry
    # entries stayed.
    old = clock.now - WORKER_RETENTION_MS - 1
    redis_client.zadd(queue.keys.workers, {f"dead{i}": old - i for i in range(30_000)})
    queue.heartbeat("recent", {"host": "h"})  # beat just inside the retention, then died
    clock.advance(WORKER_RETENTION_MS - 1)
    queue.heartbeat("alive", {"host": "h"})

    assert [w.name for w in read.workers(queue, limit=3).items] == [
        "alive", "recent", "dead0",
    ]
    assert prune_workers(queue) == 30_000
    page = read.workers(queue)
    assert [w.name for w in page.items] == ["alive", "recent"] and page.cursor is None
    assert read.stats(queue).workers == 1  # live ones are counted as before
    assert prune_workers(queue) == 0
    clock.advance(2)
    assert prune_workers(queue) == 1  # "recent" is now past the retention


def test_prune_refuses_a_retention_that_would_remove_living_workers(queue: Queue) -> None:
    with pytest.raises(InvalidInput, match="older_than_ms must be at least 60000"):
        prune_workers(queue, older_than_ms=1000)

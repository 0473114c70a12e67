"""Reads the benchmarks and pollers need that once went around the engine: the queue's
cumulative counters in one command, and the events after a cursor."""

from __future__ import annotations

import pytest

from core.queue import InvalidInput, Queue, RedisReplyError, read


def test_totals_count_the_tasks_submitted_and_done_without_the_waiting_fields(
    queue: Queue,
) -> None:
    queue.submit([{"n": 1}, {"n": 2}], request_id="r", handler="h")
    [lease, _] = queue.dequeue("w", count=2)
    queue.ack(lease)
    totals = read.totals(queue)
    assert totals["submitted"] == 2 and totals["done"] == 1  # tasks
    assert not any(f.startswith("w:") for f in totals)
    assert totals == read.stats(queue).totals


def test_events_after_a_cursor_are_those_that_came_later_oldest_first(queue: Queue) -> None:
    queue.submit([{"n": 1}], request_id="a", handler="h")
    [(first, _)] = read.events_since(queue, 0)
    queue.submit([{"n": 1}], request_id="b", handler="h")
    queue.submit([{"n": 1}], request_id="c", handler="h")
    later = read.events_after(queue, first)
    assert [f["request"] for _, f in later] == ["b", "c"]
    assert read.events_after(queue, later[-1][0]) == []
    assert [f["request"] for _, f in read.events_after(queue, first, count=1)] == ["b"]


@pytest.mark.parametrize("cursor", ["", "x", "1-2-3", "-"])
def test_an_event_cursor_that_is_no_entry_id_is_invalid_input(queue: Queue, cursor: str) -> None:
    with pytest.raises(InvalidInput):
        read.events_after(queue, cursor)


def test_a_request_dead_letters_read_that_redis_refuses_is_the_engines_error(
    queue: Queue,
) -> None:
    queue.redis.set(queue.keys.dead_map("r"), "not a hash")  # what a stray client could leave
    with pytest.raises(RedisReplyError, match="WRONGTYPE"):
        read.request_dead_letters(queue, "r")

"""The engine's operator actions of issue 8: pause/resume, claim and release checked against
what a page showed, requeue and delete of letters still dead only, reclaim of a dead worker."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis

from core.queue import Lease, LeaseLost, NotLeased, Queue, StateChanged, UnknownWorker, read
from tests.conftest import FakeClock


def events_of(redis_client: redis.Redis, queue: Queue, kind: str) -> list[dict[str, str]]:
    return [f for _, f in redis_client.xrange(queue.keys.events) if f["type"] == kind]


def kill_one(queue: Queue, rid: str, clock: FakeClock) -> str:
    """One task of `rid` dead-lettered (retry refused); returns its dead-letter id."""
    [lease] = queue.dequeue("w", 1)
    queue.fail(lease, "ValueError: boom", retry=False)
    letters = [d for d in read.dead_letters(queue, count=1000) if d.request_id == rid]
    return letters[0].id


# -- pause / resume ----------------------------------------------------------------------


def test_a_paused_queue_leases_nothing_and_running_tasks_finish(
    queue: Queue, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2, 3], request_id="r", handler="h")
    [running] = queue.dequeue("w", 1)
    assert queue.pause(by="alice") is True
    assert queue.pause() is False  # a second click: nothing more
    assert queue.paused() and read.stats(queue).paused
    assert queue.dequeue("w", 5) == []
    queue.ack(running)  # the running task finishes as usual
    queue.submit([4], request_id="r2", handler="h")  # producers may still submit
    assert queue.dequeue("w", 5) == []
    assert read.stats(queue).waiting == 3
    assert queue.resume(by="alice") is True
    assert queue.resume() is False
    assert not read.stats(queue).paused
    assert len(queue.dequeue("w", 5)) == 3
    assert [f["by"] for f in events_of(redis_client, queue, "paused")] == ["alice"]
    assert len(events_of(redis_client, queue, "resumed")) == 1


def test_no_idle_worker_is_handed_work_while_paused_and_resume_hands_it(
    queue: Queue, redis_client: redis.Redis
) -> None:
    assert queue.ack_and_dequeue("w", 1, idle_handoff=True, lease_ms=5000)[1] == []
    queue.pause()
    queue.submit([1], request_id="r", handler="h")
    assert redis_client.llen(queue.keys.handoff("w")) == 0
    assert redis_client.llen(queue.keys.wake) == 0  # no worker woken for nothing
    queue.resume()
    handed = queue.leave_idle("w", 5000)
    assert [lease.request_id for lease in handed] == ["r"]


# -- claim / release against what the page showed -----------------------------------------


def test_claim_refuses_another_holder_and_a_fresh_delivery(queue: Queue) -> None:
    queue.submit([1], request_id="r", handler="h")
    [lease] = queue.dequeue("w1", 1)
    [entry] = read.pending(queue, "r")
    with pytest.raises(StateChanged):  # the page showed another holder
        queue.claim("r", entry.task_id, "w3", expect_consumer="w2")
    time.sleep(0.02)
    assert queue.claim("r", entry.task_id, "w2", expect_consumer="w1", min_idle_ms=10) == "w1"
    # The page still shows w1 (a double click): refused, nothing moves.
    with pytest.raises(StateChanged):
        queue.claim("r", entry.task_id, "w3", expect_consumer="w1", min_idle_ms=10)
    assert queue.release([lease]) == [-1]  # w1's run stopped: the task goes to w2
    # Right holder, but delivered again since the page was drawn: idle is less than shown.
    with pytest.raises(StateChanged):
        queue.release_task("r", entry.task_id, expect_consumer="w2", min_idle_ms=60_000)
    [now] = read.pending(queue, "r")
    assert now.consumer == "w2" and now.deliveries == 2
    assert queue.release_task("r", entry.task_id, expect_consumer="w2") == "w2"
    with pytest.raises(NotLeased):  # released already: it waits for w2 to let go
        queue.release_task("r", entry.task_id, expect_consumer="w2")
    assert isinstance(NotLeased("x"), StateChanged)
    assert queue.dequeue("w4", 1) == []
    # w2 never took what it was handed: a worker gives that back when it stops.
    assert queue.release(queue.leave_idle("w2")) == [-1]
    [again] = queue.dequeue("w4", 1)
    assert again.attempt == 1  # neither claim nor release spent an attempt
    with pytest.raises(Exception):  # noqa: B017 - the old lease is void
        queue.ack(lease)


# -- release and claim of a running task: never beside its old run (issue 18) -------------


def stop_old_run(queue: Queue, clock: FakeClock, lease: Lease, how: str, expiry: int
                 ) -> list[Any]:
    """The run of a lease an operator took away is over: its worker says so (it releases the
    lease, or its ack or fail is refused), or its lease runs out (the reaper). Returns what the
    reaper did."""
    if how == "release":
        assert queue.release([lease]) == [-1]
    elif how == "ack":
        with pytest.raises(LeaseLost):
            queue.ack(lease)
    elif how == "fail":
        with pytest.raises(LeaseLost):
            queue.fail(lease, "ValueError: boom")
    else:
        clock.advance(expiry - clock.now)
        assert queue.reap() == []
        clock.advance(1)
        return queue.reap()
    return []


HOW = ["release", "ack", "fail", "expiry"]


@pytest.mark.parametrize("how", HOW)
def test_a_released_task_runs_again_only_once_its_old_run_is_over(
    queue: Queue, clock: FakeClock, how: str
) -> None:
    """Was: release_task put the task back to waiting at once, so with concurrency 1 worker B
    started it (or the next task) while A's handler ran on until A's next renewal."""
    queue.submit([1, 2], request_id="r", handler="h", concurrency=1, lease_ms=5000)
    [a] = queue.dequeue("A", 1)
    expiry = clock.now + 5000
    clock.advance(100)
    assert queue.release_task("r", a.task_id, expect_consumer="A") == "A"
    assert queue.dequeue("B", 2) == [], "B started a task while A's run may go on"
    assert queue.extend([a]) == [-1]  # A's next renewal: it learns, and stops at its check
    assert queue.dequeue("B", 2) == []  # its handler may still be running
    [entry] = read.pending(queue, "r")
    assert (entry.consumer, entry.lease_expires_ms, entry.moves_by_ms) == ("A", None, expiry)
    info = read.request(queue, "r")
    assert info is not None and (info.leased, info.waiting) == (1, 1)
    with pytest.raises(NotLeased):  # a second click: it is on its way already
        queue.release_task("r", a.task_id)
    reaped = stop_old_run(queue, clock, a, how, expiry)
    if how == "expiry":
        assert [(x.task_id, x.worker, x.outcome) for x in reaped] == [(a.task_id, "A", "waiting")]
    got = queue.dequeue("B", 2)
    # Released first, no attempt spent, and one at a time.
    assert [(x.task_id, x.attempt) for x in got] == [(a.task_id, 1)]
    assert [f["by"] for f in events_of(queue.redis, queue, "moved")] == [
        "expiry" if how == "expiry" else "holder"]
    queue.ack(got[0])
    [b] = queue.dequeue("B", 2)
    queue.ack(b)
    assert queue.state("r") == "done"


@pytest.mark.parametrize("how", HOW)
def test_a_claimed_task_goes_to_its_new_consumer_only_once_its_old_run_is_over(
    queue: Queue, clock: FakeClock, how: str
) -> None:
    """Was: claim leased the task to the new consumer at once, beside the old run."""
    queue.submit([1, 2], request_id="r", handler="h", concurrency=1, lease_ms=5000)
    [a] = queue.dequeue("A", 1)
    holder = queue.claim("r", a.task_id, "C", expect_consumer="A")
    new = f"r/{a.task_id}/2"
    assert queue.extend([new]) == [-1], "C holds the task while A's run may go on"
    assert holder == "A"
    assert queue.dequeue("B", 2) == [] and queue.leave_idle("C") == []
    expiry = clock.now + 5000
    [entry] = read.pending(queue, "r")
    assert entry.consumer == "A" and entry.moves_by_ms == expiry
    reaped = stop_old_run(queue, clock, a, how, expiry)
    if how == "expiry":
        assert [(x.task_id, x.worker, x.outcome) for x in reaped] == [(a.task_id, "A", "claimed")]
    assert queue.dequeue("B", 2) == []  # C holds it now
    [handed] = queue.leave_idle("C")  # a worker named C takes it from its handoff list
    assert (handed.lease, handed.attempt, handed.payload) == (new, 1, 1)
    [entry] = read.pending(queue, "r")
    assert (entry.consumer, entry.lease_expires_ms) == ("C", clock.now + 5000)
    queue.ack(handed)
    assert [x.task_id for x in queue.dequeue("B", 2)] != [a.task_id]


def test_a_task_whose_lease_already_ran_out_moves_on_at_once(
    queue: Queue, clock: FakeClock
) -> None:
    """A holder that stopped renewing is not running it (or is the reaper's anyway)."""
    queue.submit([1, 2], request_id="r", handler="h", concurrency=1, lease_ms=1000)
    [a] = queue.dequeue("A", 1)
    clock.advance(1001)
    assert queue.release_task("r", a.task_id) == "A"
    [again] = queue.dequeue("B", 1)
    assert again.task_id == a.task_id
    clock.advance(1001)
    assert queue.claim("r", a.task_id, "C") == "B"
    assert [x.lease for x in queue.leave_idle("C")] == [f"r/{a.task_id}/3"]


def test_a_request_cancelled_while_a_released_task_drains_completes_when_it_stops(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1, 2], request_id="r", handler="h", concurrency=1, lease_ms=5000)
    [a] = queue.dequeue("A", 1)
    queue.release_task("r", a.task_id)
    cancelled = queue.cancel("r")
    assert (cancelled.state, cancelled.dropped, cancelled.running) == ("cancelling", 1, 1)
    assert queue.wait("r", timeout=0) is None  # its old run may still go on
    assert queue.release([a]) == [-1]
    assert queue.state("r") == "cancelled"
    info = read.request(queue, "r")
    assert info is not None and (info.cancelled, info.leased) == (2, 0)


def test_a_reclaimed_holders_released_task_moves_on_at_once(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit([1], request_id="r", handler="h", lease_ms=5000)
    [a] = queue.dequeue("A", 1)
    queue.heartbeat("A", {"dead_after_ms": 5000, "tasks": []}, [a])
    assert queue.claim("r", a.task_id, "C") == "A"
    assert queue.reclaim_worker("A", crashed=True) == (1, 0)  # its process is gone
    assert [x.task_id for x in queue.leave_idle("C")] == [a.task_id]


# -- requeue / delete of letters still dead ------------------------------------------------


def test_requeue_and_delete_act_only_on_letters_still_dead(
    queue: Queue, clock: FakeClock, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2, 3], request_id="r", handler="h", concurrency=1)
    a = kill_one(queue, "r", clock)
    b = kill_one(queue, "r", clock)
    assert queue.requeue([a]) == (1, 0)
    assert queue.requeue([a]) == (0, 1)  # a double click: skipped, not requeued twice
    assert queue.delete_dead([a, b]) == (1, 1)  # a is no longer dead
    assert queue.delete_dead([b]) == (0, 1)
    info = read.request(queue, "r")
    assert info is not None and (info.dead, info.discarded) == (0, 1)
    assert [f["count"] for f in events_of(redis_client, queue, "discarded")] == ["1"]
    assert read.stats(queue).dead == 0
    assert redis_client.hget(queue.keys.stats, "discarded") == "1"
    # The rest of the request runs on; it completes as failed: a task of it was discarded.
    for _ in range(2):
        [lease] = queue.dequeue("w", 1)
        queue.ack(lease)
    assert queue.state("r") == "failed"


def test_delete_of_a_letter_whose_request_expired_removes_it(
    queue: Queue, clock: FakeClock, redis_client: redis.Redis
) -> None:
    queue.submit([1], request_id="r", handler="h")
    d = kill_one(queue, "r", clock)
    redis_client.delete(queue.keys.request("r"))  # its retention is over
    assert queue.delete_dead([d]) == (1, 0)
    assert redis_client.xlen(queue.keys.dead) == 0


def test_requeue_and_delete_go_by_chunks(queue: Queue, clock: FakeClock) -> None:
    queue.submit(list(range(1200)), request_id="r", handler="h", concurrency=2000,
                 max_attempts=1)
    leases = queue.dequeue("w", 1000) + queue.dequeue("w", 1000)
    for lease in leases:
        queue.fail(lease, "E: x", retry=False)
    ids = [d.id for d in read.dead_letters(queue, count=1000)]
    ids += [d.id for d in read.dead_letters(queue, before=ids[-1], count=1000)]
    assert len(ids) == 1200
    assert queue.requeue([*ids[:1100], "1-1"]) == (1100, 1)
    assert queue.delete_dead(ids) == (100, 1100)


# -- reclaim a dead worker -----------------------------------------------------------------


def test_reclaim_refuses_a_live_worker_and_takes_back_a_dead_ones_leases(
    queue: Queue, clock: FakeClock, redis_client: redis.Redis
) -> None:
    queue.submit([1, 2, 3], request_id="r", handler="h")
    mine = queue.ack_and_dequeue("dead-w", 2, lease_ms=2000)[1]
    [other] = queue.ack_and_dequeue("live-w", 1, lease_ms=2000)[1]
    tasks = [{"queue": "q", "request": "r", "task": lease.task_id} for lease in mine]
    queue.heartbeat("dead-w", {"dead_after_ms": 2000, "tasks": tasks}, mine, lease_ms=2000)
    with pytest.raises(StateChanged):
        queue.reclaim_worker("dead-w")  # beat just now
    with pytest.raises(UnknownWorker):
        queue.reclaim_worker("nobody")
    clock.advance(2500)
    queue.heartbeat("live-w", {"dead_after_ms": 2000}, [other], lease_ms=2000)
    with pytest.raises(StateChanged):
        queue.reclaim_worker("live-w")
    assert queue.reclaim_worker("dead-w") == (2, 0)
    assert redis_client.zscore(queue.keys.workers, "dead-w") is None
    assert not redis_client.exists(queue.keys.worker("dead-w"))
    again = queue.dequeue("w", 5)
    assert sorted(lease.attempt for lease in again) == [1, 1]  # no attempt spent
    assert queue.extend([other]) == [1]  # the live worker's lease untouched
    released = events_of(redis_client, queue, "released")
    assert {f["worker"] for f in released} == {"dead-w"} and len(released) == 2
    assert [f["worker"] for f in events_of(redis_client, queue, "reclaimed")] == ["dead-w"]


def test_reclaim_finds_expired_leases_its_heartbeat_did_not_list(
    queue: Queue, clock: FakeClock
) -> None:
    queue.submit(list(range(5)), request_id="r", handler="h", concurrency=10)
    queue.ack_and_dequeue("dead-w", 5, lease_ms=1000)
    queue.heartbeat("dead-w", {"dead_after_ms": 1000, "tasks": []}, [], lease_ms=1000)
    clock.advance(1500)
    assert queue.reclaim_worker("dead-w") == (5, 0)
    assert read.stats(queue).leased == 0


def test_a_crashed_workers_leases_are_reaped_at_once_each_counting_as_an_attempt(
    queue: Queue, clock: FakeClock, redis_client: redis.Redis
) -> None:
    """Its supervisor saw the process exit (the stack): the leases go back now, not after
    --dead-after, and as the reaper would, a delivery counts: a task that keeps killing its
    worker ends in the dead letters."""
    queue.submit([1, 2], request_id="r", handler="h", max_attempts=2)
    mine = queue.ack_and_dequeue("w.1", 2, lease_ms=60_000)[1]
    tasks = [{"queue": "q", "request": "r", "task": lease.task_id} for lease in mine]
    queue.heartbeat("w.1", {"dead_after_ms": 60_000, "tasks": tasks}, mine, lease_ms=60_000)
    assert queue.reclaim_worker("w.1", crashed=True) == (2, 0)  # it beat just now
    assert redis_client.zscore(queue.keys.workers, "w.1") is None
    again = queue.ack_and_dequeue("w.2", 2, lease_ms=60_000)[1]
    assert sorted(lease.attempt for lease in again) == [2, 2]  # the crash counted
    queue.heartbeat("w.2", {"dead_after_ms": 60_000, "tasks": [
        {"queue": "q", "request": "r", "task": lease.task_id} for lease in again]}, again,
        lease_ms=60_000)
    assert queue.reclaim_worker("w.2", crashed=True) == (0, 0)
    info = read.request(queue, "r")
    assert info is not None and info.dead == 2 and info.state == "failed"
    [letter, _] = read.request_dead_letters(queue, "r")
    assert letter.error == "worker w.2 died (its process exited) while it ran the task"
    reaped = events_of(redis_client, queue, "reaped")
    assert [(f["worker"], f["outcome"], f["by"]) for f in reaped] == \
        [("w.1", "waiting", "supervisor")] * 2 + [("w.2", "dead", "supervisor")] * 2


def test_a_reclaimed_workers_tasks_are_not_handed_back_to_its_idle_slots(
    queue: Queue, clock: FakeClock
) -> None:
    """One slot of the dead worker held a task, another waited idle for handoffs: the task
    goes back to waiting, not to the dead worker's handoff list."""
    queue.submit([1], request_id="r", handler="h")
    [held] = queue.ack_and_dequeue("w.1", 1, lease_ms=5000)[1]
    assert queue.ack_and_dequeue("w.1", 1, lease_ms=5000, idle_handoff=True)[1] == []  # idle
    queue.heartbeat("w.1", {"dead_after_ms": 10_000, "tasks": [
        {"queue": "q", "request": "r", "task": held.task_id}]}, [held], lease_ms=5000)
    assert queue.reclaim_worker("w.1", crashed=True) == (1, 0)
    [entry] = read.pending(queue, "r")
    assert entry.consumer == "~waiting"
    assert queue.redis.zcard(queue.keys.idle) == 0


# -- pause with real workers ----------------------------------------------------------------


def test_running_workers_take_nothing_from_a_paused_queue_and_resume_at_once(
    live_queue: Queue, spawn_worker: Any, wait_until: Any, prefix: str
) -> None:
    """A worker process: its running task finishes while the queue is paused, it starts no
    other (idle, it is handed nothing and woken for nothing), and picks the work up as soon
    as the queue resumes, without waiting out a poll."""
    k = f"{prefix}:t"
    live_queue.submit([{"k": k, "seconds": 0.5}], request_id="first", handler="tracked")
    spawn_worker("w1")
    wait_until(lambda: live_queue.redis.llen(f"{k}:log") >= 1, 15, "the first task to start")
    live_queue.pause()
    live_queue.submit([{"k": k, "seconds": 0}] * 3, request_id="later", handler="tracked")
    wait_until(lambda: live_queue.state("first") == "done", 10, "the running task to finish")
    time.sleep(1.5)  # a worker that leased now would have started a task
    info = read.request(live_queue, "later")
    assert info is not None and (info.waiting, info.leased, info.done) == (3, 0, 0)
    resumed = time.monotonic()
    live_queue.resume()
    wait_until(lambda: live_queue.state("later") == "done", 10, "the work after resume")
    assert time.monotonic() - resumed < 2

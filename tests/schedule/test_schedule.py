"""Recurring schedules (issue 19): definitions, policies, DST, and exactly-once firing by
racing schedulers, on the suite's redis-server with a fake clock."""

from __future__ import annotations

import threading
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
import redis

from core.queue import Queue
from core.queue.schedule import fire, spec
from core.queue.schedule.api import cron, declare, every
from core.queue.schedule.scheduler import Scheduler
from core.queue.schedule.spec import InvalidSchedule, Schedule, parse_every
from core.queue.schedule.store import ScheduleExists, Schedules
from tests.conftest import FakeClock

BERLIN = ZoneInfo("Europe/Berlin")
MIN = 60_000


def ms(*args: int, tz: ZoneInfo = BERLIN) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)  # type: ignore[misc]


def tasks_schedule(name: str = "s", **kw: object) -> Schedule:
    fields: dict[str, object] = {"handler": "h", "tasks": [{"n": 1}], "queue": "q"}
    fields.update(kw)
    return Schedule(name=name, **fields)  # type: ignore[arg-type]


def scheduler(queue: Queue, clock: FakeClock) -> Scheduler:
    return Scheduler(queue.redis, prefix=queue.keys.prefix, queues=["q"], clock=clock)


def submitted(queue: Queue) -> int:
    return int(queue.redis.hget(queue.keys.stats, "submitted") or 0)


# -- definitions and validation --------------------------------------------------------------


@pytest.mark.parametrize(("kw", "says"), [
    ({"cron": "61 * * * *"}, "bad cron expression '61 * * * *': Bad minute"),
    ({"cron": "* * *"}, "five fields"),
    ({"cron": "0 0 30 2 *"}, "bad cron expression"),
    ({"cron": "30 2 * * *", "tz": "Europe/Berlinn"}, "unknown time zone 'Europe/Berlinn'"),
    ({"every_s": "10x"}, "bad interval '10x'"),
    ({"every_s": 0}, "between 1 second and 366 days"),
    ({"cron": "* * * * *", "every_s": 60}, "not both or neither"),
    ({}, "not both or neither"),
    ({"every_s": 60, "start_ms": 2000, "end_ms": 1000}, "is not after the start"),
    ({"every_s": 60, "missed": "some"}, "missed must be one of latest, all, none"),
    ({"every_s": 60, "missed": "all"}, "use overlap=allow with it"),
    ({"every_s": 60, "overlap": "queue"}, "overlap must be one of skip, allow"),
    ({"every_s": 60, "tasks": []}, "at least one task payload"),
    ({"every_s": 60, "options": {"priority": 120}}, "priority must be between 0 and 99"),
    ({"every_s": 60, "options": {"colour": 1}}, "unknown request option(s) colour"),
])
def test_a_bad_schedule_is_refused_with_a_message_saying_what_is_wrong(
        kw: dict[str, object], says: str) -> None:
    with pytest.raises(InvalidSchedule) as err:
        tasks_schedule(**kw).validated()
    assert says in str(err.value)


def test_a_bad_name_is_refused() -> None:
    with pytest.raises(InvalidSchedule, match="invalid schedule name"):
        tasks_schedule("bad name", every_s=60).validated()


def test_intervals_read_as_people_write_them() -> None:
    assert parse_every("10m") == 600
    assert parse_every("1h30m") == 5400
    assert parse_every("90") == 90
    assert parse_every("1d") == 86_400


def test_words_for_the_expression() -> None:
    s = tasks_schedule(cron="30 2 * * *", tz="Europe/Berlin").validated()
    assert s.describe() == "At 02:30 (Europe/Berlin)"
    assert tasks_schedule(every_s=600).validated().describe() == "Every 10m"


def test_the_words_of_an_expression_are_kept_and_a_long_one_is_not() -> None:
    expr = "17 4 * * 1"
    before = spec._kept_cron_words.cache_info()
    first, again = spec.cron_words(expr), spec.cron_words(expr)
    assert first == again and "04:17" in first
    after = spec._kept_cron_words.cache_info()
    assert after.hits >= before.hits + 1
    long_expr = ",".join(["5"] * 200) + " * * * *"  # valid, and over 256 characters
    s = tasks_schedule(cron=long_expr).validated()
    assert s.describe().startswith("At 5, 5")
    assert spec._kept_cron_words.cache_info().currsize == after.currsize


# -- time zones and DST ------------------------------------------------------------------


def test_a_daily_schedule_runs_once_on_the_spring_forward_day() -> None:
    s = tasks_schedule(cron="30 2 * * *", tz="Europe/Berlin").validated()
    slots = s.upcoming(ms(2026, 3, 28, 12, 0), 3)
    local = [datetime.fromtimestamp(x / 1000, BERLIN).isoformat() for x in slots]
    # 02:30 does not exist on 29 March: the run is at the first instant after it, once.
    assert local == ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00",
                     "2026-03-31T02:30:00+02:00"]


def test_a_daily_schedule_runs_once_on_the_fall_back_day() -> None:
    s = tasks_schedule(cron="30 2 * * *", tz="Europe/Berlin").validated()
    slots = s.upcoming(ms(2026, 10, 24, 12, 0), 3)
    local = [datetime.fromtimestamp(x / 1000, BERLIN).isoformat() for x in slots]
    # 02:30 happens twice on 25 October: the run is at the first, once.
    assert local == ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00",
                     "2026-10-27T02:30:00+01:00"]


@pytest.mark.parametrize("start", [(2026, 3, 27, 12, 0), (2026, 10, 23, 12, 0)])
def test_a_scheduler_fires_one_run_a_day_across_dst(queue: Queue, clock: FakeClock,
                                                    start: tuple[int, ...]) -> None:
    clock.now = ms(*start)
    Schedules(queue).upsert(tasks_schedule(cron="30 2 * * *", tz="Europe/Berlin",
                                           overlap="allow"))
    sch = scheduler(queue, clock)
    fired: list[str] = []
    for _ in range(4 * 24 * 6):  # four days, a tick each 10 minutes
        clock.advance(10 * MIN)
        fired += sch.tick().fired_ids
    days = [datetime.fromtimestamp(int(r.rsplit(".", 1)[1]), BERLIN).strftime("%m-%d %H:%M")
            for r in fired]
    assert len(days) == 4
    assert len({d[:5] for d in days}) == 4  # one a day, the DST day too


# -- firing and the policies ------------------------------------------------------------------


def test_each_slot_fires_once_with_an_id_of_the_schedule_and_the_slot(
        queue: Queue, clock: FakeClock) -> None:
    clock.now = 1_700_000_000_000
    store = Schedules(queue)
    store.upsert(tasks_schedule(every_s=10, overlap="allow"))
    sch = scheduler(queue, clock)
    fired: list[str] = []
    for _ in range(60):
        clock.advance(1000)
        fired += sch.tick().fired_ids
        fired += sch.tick().fired_ids  # a second tick at the same instant fires nothing
    assert fired == [f"sched.s.{1_700_000_010 + 10 * i}" for i in range(6)]
    assert queue.state(fired[0]) == "active"
    runs = store.runs("s")
    assert [r.status for r in runs] == ["fired"] * 6
    assert runs[0].request_id == fired[-1]


def test_missed_latest_runs_the_latest_missed_slot_once(queue: Queue, clock: FakeClock) -> None:
    store = Schedules(queue)
    store.upsert(tasks_schedule(every_s=60, overlap="allow"))
    sch = scheduler(queue, clock)
    first = store.require("s").next_ms
    assert first is not None
    clock.now = first + 10 * MIN + 5000  # the schedulers were down for ten minutes
    report = sch.tick()
    assert report.fired_ids == [f"sched.s.{(first + 10 * MIN) // 1000}"]
    assert report.skipped == 10
    runs = store.runs("s")
    assert (runs[0].status, runs[1].status, runs[1].count) == ("fired", "missed", 10)
    assert store.require("s").next_ms == first + 11 * MIN


def test_missed_all_replays_up_to_the_bound(queue: Queue, clock: FakeClock) -> None:
    store = Schedules(queue)
    store.upsert(tasks_schedule(every_s=60, missed="all", missed_max=4, overlap="allow"))
    first = store.require("s").next_ms
    assert first is not None
    clock.now = first + 9 * MIN  # ten slots due
    report = scheduler(queue, clock).tick()
    assert report.fired_ids == [f"sched.s.{(first + k * MIN) // 1000}" for k in range(6, 10)]
    assert report.skipped == 6
    assert submitted(queue) == 4


def test_missed_none_skips_what_downtime_missed(queue: Queue, clock: FakeClock) -> None:
    store = Schedules(queue)
    store.upsert(tasks_schedule(every_s=300, missed="none"))
    first = store.require("s").next_ms
    assert first is not None
    clock.now = first + 8 * MIN  # slots at +0 and +5 min: the later one is 3 minutes old
    sch = scheduler(queue, clock)
    report = sch.tick()
    assert report.fired_ids == [] and report.skipped == 2
    clock.now = first + 10 * MIN  # the next slot, on time, fires
    assert sch.tick().fired_ids == [f"sched.s.{(first + 10 * MIN) // 1000}"]


def test_overlap_skip_waits_for_the_previous_run(queue: Queue, clock: FakeClock) -> None:
    store = Schedules(queue)
    store.upsert(tasks_schedule(every_s=60))
    first = store.require("s").next_ms
    assert first is not None
    sch = scheduler(queue, clock)
    clock.now = first
    [rid] = sch.tick().fired_ids
    clock.now = first + MIN  # the first run has not finished
    report = sch.tick()
    assert report.fired_ids == [] and report.skipped == 1
    assert store.runs("s")[0].status == "overlap"
    assert rid in store.runs("s")[0].note
    queue.cancel(rid)  # it ends (cancelled counts as ended)
    clock.now = first + 2 * MIN
    assert sch.tick().fired_ids == [f"sched.s.{(first + 2 * MIN) // 1000}"]


def test_overlap_allow_runs_side_by_side(queue: Queue, clock: FakeClock) -> None:
    store = Schedules(queue)
    store.upsert(tasks_schedule(every_s=60, overlap="allow"))
    first = store.require("s").next_ms
    assert first is not None
    sch = scheduler(queue, clock)
    for k in range(3):
        clock.now = first + k * MIN
        assert len(sch.tick().fired_ids) == 1


def test_start_and_end_bound_the_slots(queue: Queue, clock: FakeClock) -> None:
    start = clock.now + 5 * MIN
    store = Schedules(queue)
    store.upsert(tasks_schedule(every_s=60, overlap="allow", start_ms=start,
                                end_ms=start + 2 * MIN))
    assert store.require("s").next_ms == start
    sch = scheduler(queue, clock)
    fired = []
    for _ in range(12):
        clock.advance(MIN)
        fired += sch.tick().fired_ids
    assert len(fired) == 3
    assert store.require("s").next_ms is None


# -- definitions in Redis --------------------------------------------------------------------


def test_upsert_is_idempotent_and_a_change_keeps_the_fired_slots(
        queue: Queue, clock: FakeClock) -> None:
    store = Schedules(queue)
    s = tasks_schedule(every_s=60)
    assert store.upsert(s).status == "created"
    before = store.require("s")
    assert store.upsert(s).status == "unchanged"
    assert store.require("s").version == before.version
    with pytest.raises(ScheduleExists):
        store.upsert(s, mode="create")
    changed = store.upsert(tasks_schedule(every_s=120))
    assert (changed.status, changed.version) == ("updated", before.version + 1)
    assert store.require("s").schedule.every_s == 120


def test_declare_from_code(queue: Queue, clock: FakeClock) -> None:
    a = cron("nightly", "30 2 * * *", tz="Europe/Berlin", handler="h", tasks=[{}])
    b = every("poll", "10m", handler="h", tasks=[{}])
    assert {n: c.status for n, c in declare(queue, a, b).items()} == \
        {"nightly": "created", "poll": "created"}
    assert {n: c.status for n, c in declare(queue, a, b).items()} == \
        {"nightly": "unchanged", "poll": "unchanged"}
    assert Schedules(queue).names() == ["nightly", "poll"]


def test_pause_resume_remove_and_run_now(queue: Queue, clock: FakeClock) -> None:
    store = Schedules(queue)
    store.upsert(tasks_schedule(every_s=60))
    sch = scheduler(queue, clock)
    assert store.pause("s", by="alice") and not store.pause("s")
    clock.advance(5 * MIN)
    assert sch.tick().fired_ids == []
    assert store.resume("s") and not store.resume("s")
    nxt = store.require("s").next_ms
    assert nxt is not None and nxt > clock.now  # the paused slots are not run
    rid = store.run_now("s", by="bob")
    assert queue.state(rid) == "active"
    assert (store.runs("s")[0].status, store.runs("s")[0].by) == ("run-now", "bob")
    clock.now = nxt
    assert sch.tick().fired_ids == []  # overlap=skip: the run-now request still runs
    assert store.remove("s") and not store.remove("s")
    assert store.get("s") is None and store.names() == []


def test_a_data_job_schedule_templates_its_output_with_the_slot() -> None:
    s = Schedule(name="delays", queue="q", cron="0 3 * * *", tz="Europe/Berlin",
                 job={"input": "/data/in.csv", "format": "csv", "output": "/out/delays/{date}",
                      "sql": "SELECT * FROM chunk"}).validated()
    job = s.job_fields(ms(2026, 3, 29, 3, 0))
    assert (job["job_id"], job["output"]) == ("sched.delays.1774746000", "/out/delays/2026-03-29")
    with pytest.raises(InvalidSchedule, match="bad template"):
        Schedule(name="x", queue="q", every_s=60,
                 job={"input": "/i", "format": "csv", "output": "/o/{when}"}).validated()


# -- exactly once, whatever races ------------------------------------------------------------


def test_racing_schedulers_fire_each_slot_exactly_once(
        redis_client: redis.Redis, prefix: str, clock: FakeClock) -> None:
    queue = Queue(redis_client, "q", prefix=prefix, clock=clock)
    store = Schedules(queue)
    for i in range(40):
        store.upsert(tasks_schedule(f"s{i}", every_s=1 + i % 3, overlap="allow"))
    schedulers = [scheduler(queue, clock) for _ in range(3)]
    created = [0, 0, 0]
    start = clock.now
    for _ in range(30):
        clock.advance(1000)
        barrier = threading.Barrier(3)

        def run(i: int, barrier: threading.Barrier) -> None:
            barrier.wait()
            created[i] += schedulers[i].tick().fired
        threads = [threading.Thread(target=run, args=(i, barrier)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    steps = [(1 + i % 3) * 1000 for i in range(40)]  # slots in (start, now] of each
    expected = sum(clock.now // step - start // step for step in steps)
    assert sum(created) == expected == submitted(queue)


def test_a_scheduler_dying_after_its_claim_leaves_the_slot_to_another(
        queue: Queue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Schedules(queue)
    store.upsert(tasks_schedule(every_s=60))
    first = store.require("s").next_ms
    assert first is not None
    clock.now = first
    a, b = scheduler(queue, clock), scheduler(queue, clock)

    class Died(BaseException):
        pass

    def die(*args: object) -> bool:
        raise Died

    monkeypatch.setattr(fire, "submit", die)
    with pytest.raises(Died):
        a.tick()  # claimed, then killed before its submit
    monkeypatch.undo()
    assert submitted(queue) == 0
    assert b.tick().fired == 0  # the claim's lease has not run out
    clock.advance(fire.PENDING_LEASE_MS)
    report = b.tick()
    assert (report.recovered, report.fired_ids) == (1, [f"sched.s.{first // 1000}"])
    assert submitted(queue) == 1
    assert store.require("s").pending is None
    clock.advance(1000)
    assert a.tick().fired == b.tick().fired == 0


def test_a_takeover_of_a_submitted_slot_submits_nothing_twice(
        queue: Queue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    store = Schedules(queue)
    store.upsert(tasks_schedule(every_s=60))
    first = store.require("s").next_ms
    assert first is not None
    clock.now = first
    a, b = scheduler(queue, clock), scheduler(queue, clock)

    def no_settle(*args: object, **kwargs: object) -> None:
        raise SystemExit  # submitted, then killed before it confirmed

    monkeypatch.setitem(a.store("q")._scripts, "settle", no_settle)
    with pytest.raises(SystemExit):
        a.tick()
    clock.advance(fire.PENDING_LEASE_MS)
    report = b.tick()
    assert (report.recovered, report.fired) == (1, 0)
    assert submitted(queue) == 1

"""Each condition on a real Redis and database: it fires when what it watches holds (after the
rule's `for`), tells its channel once, and resolves with one recovery message; what cannot be
told (Redis down) changes nothing; a rule's rate limit and quiet period hold messages back;
two evaluators of one rule write one pass."""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import pytest
from django.utils import timezone

from core.alerts.evaluate import Pass, evaluate, evaluate_all
from core.alerts.look import Look
from core.alerts.sender import send_due
from core.models import AlertChannel, AlertIncident, AlertMessage, AlertRule, DeadLetter
from core.ops import alerts as ops
from core.queue import Queue, handlers
from tests.alerts_support import Receiver, free_port
from tests.mirror_support import mirror
from tests.ops_support import CLI

pytestmark = pytest.mark.django_db
LATER = dt.timedelta(minutes=5)


def rule(receiver: Receiver, when: str, **kw: Any) -> AlertRule:
    if not AlertChannel.objects.filter(name="hook").exists():
        ops.add_channel(CLI, "hook", webhook=receiver.url())
    return ops.add_rule(CLI, ops.RuleSpec(name=kw.pop("name", when), when=when,
                                          channels=["hook"], **kw))


def tell(now: dt.datetime | None = None) -> list[dict[str, Any]]:
    """A pass of the evaluator and of the sender (at `now`); what the receiver has now."""
    evaluate_all(now=now)
    send_due(now=now)
    return [{"status": m.status, **m.body} for m in
            AlertMessage.objects.filter(delivery="sent").order_by("pk")]


def test_work_that_no_live_worker_runs_fires_and_resolves_when_one_does(
    alerting: Queue, receiver: Receiver
) -> None:
    rule(receiver, "no-live-worker", queue="default")
    alerting.submit([1, 2, 3], handler="resize", request_id="r1")
    [told] = tell()
    assert told["summary"] == ("3 tasks of handler resize wait in queue default and no live "
                               "worker is there to take them")
    assert told["url"] == "http://console.test:8000/workers/?queue=default"
    assert told["subject"] == "default/resize"

    # A live worker that runs another handler: still nobody for resize.
    alerting.heartbeat("w1", {"dead_after_ms": 10_000})
    handlers.announce(alerting, "w1", ["thumbnail"])
    assert len(tell()) == 1
    assert "no live worker that runs resize" in AlertIncident.objects.get().summary

    handlers.announce(alerting, "w1", ["thumbnail", "resize"])
    told = tell()
    assert [m["status"] for m in told] == ["firing", "resolved"]
    assert "no longer wait without a live worker" in told[1]["summary"]
    assert len(tell()) == 2  # once


def test_no_live_worker_over_a_threshold_of_waiting_tasks(
    alerting: Queue, receiver: Receiver
) -> None:
    rule(receiver, "no-live-worker", threshold="5")
    alerting.submit([1] * 5, handler="h", request_id="r1")
    assert tell() == []  # 5 wait: not more than 5
    alerting.submit([1], handler="h", request_id="r2")
    [told] = tell()
    assert told["summary"].startswith("6 tasks of handler h wait in queue default")


def test_for_holds_a_condition_back_until_it_has_lasted(
    alerting: Queue, receiver: Receiver
) -> None:
    rule(receiver, "no-live-worker", for_="1m")
    alerting.submit([1], handler="h", request_id="r1")
    assert tell() == []
    assert AlertIncident.objects.get().status == "pending"
    assert tell(timezone.now() + dt.timedelta(seconds=30)) == []
    [told] = tell(timezone.now() + dt.timedelta(seconds=61))
    assert told["status"] == "firing"


def test_a_condition_that_stops_before_its_for_sends_nothing(
    alerting: Queue, receiver: Receiver
) -> None:
    rule(receiver, "no-live-worker", for_="1m")
    alerting.submit([1], handler="h", request_id="r1")
    tell()
    alerting.cancel("r1")
    assert tell(timezone.now() + dt.timedelta(seconds=61)) == []
    assert AlertIncident.objects.get().status == "resolved"


def test_waiting_age(alerting: Queue, receiver: Receiver) -> None:
    rule(receiver, "waiting-age", threshold="1")
    alerting.submit([1], handler="h", request_id="r1")
    assert tell() == []  # younger than a second
    time.sleep(1.1)
    [told] = tell()
    assert "the oldest waiting work in queue default was submitted 1s ago, over 1s" \
        in told["summary"]


def test_a_late_schedule_fires(alerting: Queue, receiver: Receiver) -> None:
    from core.queue.schedule.api import declare, every

    rule(receiver, "schedule-late", threshold="1m")
    declare(alerting, every("tick", "1m", handler="h", tasks=[1]))
    assert tell() == []
    [told] = tell(timezone.now() + LATER)  # no scheduler ran meanwhile
    assert told["summary"].startswith("schedule tick of queue default: its run due ")
    assert told["url"] == "http://console.test:8000/schedules/?queue=default"


def test_a_failed_data_job_fires_once_and_resolves_when_requeued_and_done(
    alerting: Queue, receiver: Receiver
) -> None:
    rule(receiver, "datajob-failed")
    alerting.submit([{"op": "split"}], handler="datajob", request_id="job1", max_attempts=1)
    [lease] = alerting.dequeue("w", 1)
    alerting.fail(lease, "ValueError: no such column: delay", retry=False, worker="w")
    mirror(alerting)
    [told] = tell()
    assert told["summary"] == ("data job job1 of queue default failed: ValueError: no such "
                               "column: delay")
    assert told["url"] == "http://console.test:8000/jobs/default/job1/"
    assert len(tell()) == 1

    alerting.requeue([DeadLetter.objects.get().entry_id])
    alerting.ack_many(alerting.dequeue("w", 1))
    mirror(alerting)
    told = tell()
    assert told[1]["status"] == "resolved"
    assert told[1]["summary"] == "data job job1 of queue default is no longer failed: done"


def test_redis_down_fires_and_leaves_the_other_incidents_as_they_were(
    alerting: Queue, receiver: Receiver, settings: Any
) -> None:
    rule(receiver, "no-live-worker")
    rule(receiver, "redis-down", for_="0")
    alerting.submit([1], handler="h", request_id="r1")
    assert [m["condition"] for m in tell()] == ["no-live-worker"]

    up = settings.REDIS_URL
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    told = tell()
    assert [m["condition"] for m in told] == ["no-live-worker", "redis-down"]
    assert "does not answer" in told[1]["summary"]
    # The worker-less work could not be read: its incident neither resolved nor fired again.
    assert AlertIncident.objects.get(rule__condition="no-live-worker").status == "firing"

    settings.REDIS_URL = up
    told = tell()
    assert [(m["condition"], m["status"]) for m in told[2:]] == [("redis-down", "resolved")]


def test_the_mirrors_lag(alerting: Queue, receiver: Receiver) -> None:
    rule(receiver, "mirror-lag", threshold="1")
    alerting.submit([1], handler="h", request_id="r1")
    mirror(alerting)
    alerting.submit([1], handler="h", request_id="r2")
    time.sleep(1.1)
    [told] = tell()
    assert told["summary"].startswith("queue default's history is 1s behind: the oldest event "
                                      "or dead letter the mirror has not written yet")
    mirror(alerting)
    assert [m["status"] for m in tell()] == ["firing", "resolved"]


def test_expired_leases_and_a_lost_worker(alerting: Queue, receiver: Receiver) -> None:
    rule(receiver, "expired-leases", for_="0")
    rule(receiver, "worker-lost")
    alerting.submit([1], handler="h", request_id="r1", lease_ms=100)
    alerting.heartbeat("w9", {"dead_after_ms": 1000, "host": "box", "pid": 7})
    alerting.dequeue("w9", 1)
    time.sleep(1.2)
    told = {m["condition"]: m["summary"] for m in tell()}
    assert told == {
        "expired-leases": "1 lease of queue default expired and was not reclaimed (is the "
                          "reaper running?)",
        "worker-lost": "worker w9 on box (pid 7) of queue default last beat 1s ago and did "
                       "not stop: it died or hangs"}


def test_a_delayed_request_held_past_its_due_time(alerting: Queue, receiver: Receiver) -> None:
    rule(receiver, "request-overdue", threshold="1m")
    alerting.submit([1], handler="h", request_id="later", delay=1)
    assert tell() == []
    [told] = tell(timezone.now() + LATER)
    assert told["summary"].startswith("delayed request later of queue default is 4m")


def test_dead_letters_faster_than_a_rate(alerting: Queue, receiver: Receiver) -> None:
    from tests.ops_support import dead_letters

    rule(receiver, "dead-rate", threshold="10")
    dead_letters(alerting, 11)
    [told] = tell()
    assert told["summary"] == ("11 dead letters in queue default in the last minute, over 10 a "
                               "minute")


def test_a_data_job_running_three_times_its_usual_time(
    alerting: Queue, receiver: Receiver
) -> None:
    rule(receiver, "datajob-slow")
    for i in range(3):
        alerting.submit([1], handler="datajob", request_id=f"done{i}")
        alerting.ack_many(alerting.dequeue("w", 1))
    alerting.submit([1], handler="datajob", request_id="slow")
    mirror(alerting)
    assert tell() == []
    [told] = tell(timezone.now() + LATER)  # the usual time is at least a minute
    assert re.fullmatch(r"data job slow of queue default has run for 5m(\d+s)?, over 1m "
                        r"\(3x its usual time\)", told["summary"]), told["summary"]


def test_redis_memory_near_maxmemory(alerting: Queue, receiver: Receiver,
                                     redis_client: Any) -> None:
    rule(receiver, "redis-memory", threshold="50%")
    used = int(redis_client.info("memory")["used_memory"])
    redis_client.config_set("maxmemory", used * 10)
    try:
        assert tell() == []
        redis_client.config_set("maxmemory", int(used * 1.5))
        [told] = tell()
        assert told["summary"].startswith("Redis uses 6")  # 1/1.5: 67%
        assert "% of its maxmemory" in told["summary"] and "over 50%" in told["summary"]
    finally:
        redis_client.config_set("maxmemory", 0)
    assert [m["status"] for m in tell()] == ["firing", "resolved"]


def test_a_rules_rate_limit_holds_the_rest_and_says_so(
    alerting: Queue, receiver: Receiver
) -> None:
    rule(receiver, "no-live-worker", max_per_hour=2)
    for h in ("a", "b", "c", "d"):
        alerting.submit([1], handler=h, request_id=f"r-{h}")
    told = tell()
    assert len(told) == 2
    assert "[2 more incidents of this rule wait: it sends at most 2 messages an hour" \
        in told[1]["summary"]
    assert AlertRule.objects.get().held_back == 2
    assert len(tell(timezone.now() + dt.timedelta(minutes=30))) == 2
    assert len(tell(timezone.now() + dt.timedelta(minutes=61))) == 4  # the next hour's


def test_the_quiet_period_keeps_a_flapping_condition_to_one_pair(
    alerting: Queue, receiver: Receiver
) -> None:
    rule(receiver, "no-live-worker", quiet="10m")
    alerting.submit([1], handler="h", request_id="r1")
    tell()
    alerting.cancel("r1")
    tell()
    alerting.submit([1], handler="h", request_id="r2")  # again, within the quiet period
    assert [m["status"] for m in tell()] == ["firing", "resolved"]
    assert AlertIncident.objects.filter(status="firing", notified=False).count() == 1
    told = tell(timezone.now() + dt.timedelta(minutes=11))  # still holding: told now
    assert [m["status"] for m in told] == ["firing", "resolved", "firing"]


def test_two_evaluators_of_one_rule_write_one_pass(alerting: Queue, receiver: Receiver) -> None:
    made = rule(receiver, "no-live-worker")
    alerting.submit([1], handler="h", request_id="r1")
    first, second = (AlertRule.objects.get(pk=made.pk) for _ in range(2))
    evaluate(first, Look(), Pass())
    evaluate(second, Look(), Pass())  # read the rule before the first wrote: stands down
    assert AlertMessage.objects.count() == 1
    assert AlertIncident.objects.count() == 1


def test_the_sender_is_woken_as_soon_as_a_rules_messages_are_queued(
    alerting: Queue, receiver: Receiver
) -> None:
    """Not at the end of the pass: a rule's messages do not wait for the rules after it."""
    rule(receiver, "no-live-worker", name="first")
    rule(receiver, "no-live-worker", name="second")
    rule(receiver, "waiting-age", name="quiet-one")  # queues nothing: no call
    alerting.submit([1], handler="h", request_id="r1")
    seen: list[list[str]] = []
    evaluate_all(queued=lambda: seen.append(
        list(AlertMessage.objects.order_by("pk").values_list("rule__name", flat=True))))
    assert seen == [["first"], ["first", "second"]]


def test_a_broken_rule_is_reported_and_the_others_still_run(
    alerting: Queue, receiver: Receiver
) -> None:
    rule(receiver, "no-live-worker")
    AlertRule.objects.create(name="from-the-future", condition="no-such-condition")
    alerting.submit([1], handler="h", request_id="r1")
    done = evaluate_all()
    assert (done.errors, done.fired) == (1, 1)
    assert "KeyError" in AlertRule.objects.get(name="from-the-future").error


def test_a_disabled_rule_closes_its_incidents_without_a_message(
    alerting: Queue, receiver: Receiver
) -> None:
    rule(receiver, "no-live-worker")
    alerting.submit([1], handler="h", request_id="r1")
    tell()
    ops.enable_rule(CLI, "no-live-worker", False)
    assert [m["status"] for m in tell()] == ["firing"]
    assert AlertIncident.objects.get().status == "resolved"


def test_redis_reporting_failed_disk_writes(
    alerting: Queue, receiver: Receiver, settings: Any, tmp_path: Any
) -> None:
    """A Redis of the test's own whose data directory is taken away: its snapshot fails (Redis
    says so in INFO), the rule fires once; the directory back and a snapshot written, it
    resolves once. (An append-only file's write error is told the same way, from
    aof_last_write_status; a test cannot make a disk refuse a write that an open file takes.)"""
    import shutil

    import redis

    from core.stack.redis_server import start_redis
    from tests.alerts_support import wait

    server = start_redis(tmp_path / "r", fsync="everysec",
                         extra=["--enable-protected-configs", "local"])  # CONFIG SET dir
    try:
        settings.REDIS_URL = server.url
        r = redis.Redis.from_url(server.url, decode_responses=True)
        rule(receiver, "redis-aof")
        assert tell() == []

        shutil.rmtree(tmp_path / "r")
        r.bgsave()
        wait(lambda: r.info("persistence")["rdb_last_bgsave_status"] == "err", 20,
             lambda: "the snapshot to fail")
        [told] = tell()
        assert told["summary"] == ("Redis reports a failed snapshot (RDB) save (err): what it "
                                   "acknowledged may not be on disk")
        assert tell() == [told]

        (tmp_path / "back").mkdir()
        r.config_set("dir", str(tmp_path / "back"))  # its old directory is gone for good
        r.bgsave()
        wait(lambda: r.info("persistence")["rdb_last_bgsave_status"] == "ok", 20,
             lambda: "the snapshot to succeed")
        assert [m["status"] for m in tell()] == ["firing", "resolved"]
    finally:
        server.stop()

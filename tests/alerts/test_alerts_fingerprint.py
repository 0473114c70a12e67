"""A new kind of failure wakes someone once: 10,000 dead letters of one bug send one message
(its count kept up to date, no second message), three different bugs send three; the kind's
incident closes after a quiet period with nothing new, or once its letters are requeued, with
one recovery message; what it said reaches a real webhook, signed."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from core.alerts.evaluate import evaluate_all
from core.alerts.sender import send_due
from core.models import AlertIncident, AlertMessage, DeadLetter
from core.ops import alerts as ops
from core.queue import Queue
from tests.alerts_support import Receiver
from tests.mirror_support import mirror
from tests.ops_support import CLI

pytestmark = pytest.mark.django_db


def fail_many(q: Queue, n: int, *, rid: str, handler: str, error: str) -> None:
    """A request of n tasks of `handler` that all die with `error` (its {i} the task's
    number: each message differs, as real ones do), mirrored into the database."""
    q.submit([{"i": i} for i in range(n)], request_id=rid, handler=handler,
             concurrency=n, max_attempts=1)
    i = 0
    while leases := q.dequeue("w", 1000):
        for lease in leases:
            q.fail(lease, error.format(i=i), retry=False, worker="w")
            i += 1
    mirror(q)


def setup_rule(receiver: Receiver, **rule: Any) -> None:
    ops.add_channel(CLI, "hook", webhook=receiver.url(), secret="s" * 32)
    ops.add_rule(CLI, ops.RuleSpec(name="bugs", when="new-fingerprint", channels=["hook"],
                                   **rule))


def firing(receiver: Receiver) -> list[dict[str, Any]]:
    return [b for b in receiver.bodies() if b["status"] == "firing"]


# 2,000 dead letters through the engine and the mirror (bench/bench_alerts.py sends 10,000
# through real processes): one message, whatever the count. 9 s.
@pytest.mark.slow
def test_two_thousand_failures_of_one_bug_send_one_message_and_three_bugs_three(
    alerting: Queue, receiver: Receiver
) -> None:
    setup_rule(receiver, queue="default")
    fail_many(alerting, 2_000, rid="r1", handler="parse",
              error="ValueError: bad row {i} in 'part-{i}.csv'")
    assert DeadLetter.objects.values("fingerprint").distinct().count() == 1

    evaluate_all()
    assert send_due().sent == 1
    [told] = firing(receiver)
    assert told["rule"] == "bugs" and told["condition"] == "new-fingerprint"
    assert told["count"] == 2_000
    assert "handler parse" in told["summary"] and "bad row <n> in '<str>'" in told["summary"]
    fp = DeadLetter.objects.first().fingerprint  # type: ignore[union-attr]
    assert told["url"] == f"http://console.test:8000/dead/default/{fp}/"
    assert receiver.calls[0].signed_by("s" * 32)

    # More of the same bug: the count grows, nothing is sent again.
    fail_many(alerting, 500, rid="r2", handler="parse",
              error="ValueError: bad row {i} in 'part-{i}.csv'")
    evaluate_all()
    send_due()
    assert len(receiver.calls) == 1
    assert AlertIncident.objects.get(status="firing").count == 2_500

    # Three other bugs (another error, another handler's same error): three messages.
    fail_many(alerting, 300, rid="r3", handler="parse", error="KeyError: 'col_{i}'")
    fail_many(alerting, 300, rid="r4", handler="load", error="ValueError: bad row {i} in 'x'")
    fail_many(alerting, 300, rid="r5", handler="load", error="TimeoutError: after {i} s")
    evaluate_all()
    assert send_due().sent == 3
    assert len(firing(receiver)) == 4
    assert len(set(receiver.ids())) == 4


def test_the_incident_closes_with_one_recovery_after_its_quiet_period(
    alerting: Queue, receiver: Receiver
) -> None:
    setup_rule(receiver, quiet="10m")
    fail_many(alerting, 20, rid="r1", handler="parse", error="OSError: disk {i} full")
    evaluate_all()
    send_due()
    assert len(receiver.calls) == 1

    evaluate_all(now=timezone.now() + dt.timedelta(minutes=5))  # still quiet: stays open
    assert AlertIncident.objects.filter(status="firing").count() == 1
    later = timezone.now() + dt.timedelta(minutes=11)
    evaluate_all(now=later)
    evaluate_all(now=later)  # once
    send_due(now=later)
    resolved = [b for b in receiver.bodies() if b["status"] == "resolved"]
    assert len(resolved) == 1
    assert "no new dead letter of this kind for 10m (20 in all)" in resolved[0]["summary"]
    assert resolved[0]["resolved_at"] is not None

    # The same bug again, after it closed: news again, told once more.
    fail_many(alerting, 5, rid="r2", handler="parse", error="OSError: disk {i} full")
    after = later + dt.timedelta(seconds=1)
    DeadLetter.objects.filter(request_id="r2").update(dead_at=after)  # they died after it
    evaluate_all(now=after)
    send_due(now=after)
    assert [b["status"] for b in receiver.bodies()] == ["firing", "resolved", "firing"]


def test_letters_requeued_close_the_incident_and_are_not_news_again(
    alerting: Queue, receiver: Receiver
) -> None:
    setup_rule(receiver)
    fail_many(alerting, 3, rid="r1", handler="parse", error="ValueError: row {i}")
    evaluate_all()
    DeadLetter.objects.update(resolution="requeued", resolved_at=timezone.now())
    evaluate_all()
    evaluate_all()  # the letters read again below the cursor are not news: told already
    send_due()
    assert [b["status"] for b in receiver.bodies()] == ["firing", "resolved"]
    assert "all 3 dead letters of this kind were requeued or deleted" in \
        receiver.bodies()[1]["summary"]


def test_scope_and_a_new_rule_looks_back_its_quiet_period_only(
    alerting: Queue, receiver: Receiver
) -> None:
    fail_many(alerting, 2, rid="old", handler="parse", error="ValueError: old {i}")
    DeadLetter.objects.update(dead_at=timezone.now() - dt.timedelta(hours=2))
    fail_many(alerting, 2, rid="other", handler="other", error="ValueError: other {i}")
    setup_rule(receiver, handler="parse")
    fail_many(alerting, 2, rid="new", handler="parse", error="KeyError: {i}")

    evaluate_all()
    send_due()
    [told] = receiver.bodies()
    assert told["details"]["handler"] == "parse" and "KeyError" in told["summary"]
    assert told["scope"] == {"handler": "parse"}
    assert AlertMessage.objects.count() == 1

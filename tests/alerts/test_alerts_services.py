"""Issue 36's check, end to end (bench/bench_alerts.py with fewer failures): a real
`runservices`, a real worker, a local webhook. One bug failing hundreds of times sends one
message and three other bugs three; stopping the only worker of a queue with work sends its
alert within 30 s; `runservices` killed with SIGKILL mid-send and started again loses no
message, sends none under two ids (the one in flight goes again with its id) and the worker
back sends one recovery."""

from __future__ import annotations

import argparse

import pytest

from bench.bench_alerts import WITHIN_S, run

# ~40 s: the sender's lease runs out after the kill (15 s: attempts of 5 s at most, the
# receiver taking 2 s to answer then)
pytestmark = pytest.mark.slow


def test_one_bug_one_message_three_bugs_three_and_nothing_lost_across_a_kill() -> None:
    r = run(argparse.Namespace(failures=500, others=50, every=1.0, send_timeout=5,
                               database_url="", keep_logs=None))
    assert (r["one_bug_messages"], r["one_bug_incident_count"]) == (1, 500)
    assert r["three_bugs_messages"] == 3
    for figure in ("first_bug_latency_s", "three_bugs_latency_max_s", "no_worker_latency_s"):
        assert 0 < r[figure] < WITHIN_S, (figure, r)
    assert r["mid_send_rows_sending_at_kill"] >= 1, r  # it was killed mid-send
    assert r["outbox_rows"] == r["received_distinct"] == r["messages_expected"], r
    assert (r["lost"], r["unknown_ids"]) == (0, 0), r
    assert r["repeats_same_id"] <= r["mid_send_rows_sending_at_kill"], r
    assert r["recovery_messages"] == 1 and r["all_signed"], r

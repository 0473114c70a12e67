"""A real worker's handler metrics: the accepted acks it tallies reach the engine's minute
hash about a second after they ran while it keeps running, and all of them when it stops."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from core.queue import Queue, read
from core.queue.metrics import TALLY_FLUSH_S, HandlerCounts, minute_of

pytestmark = pytest.mark.filterwarnings("ignore::core.queue.errors.UnknownHandlerWarning")


def done(queue: Queue, handler: str) -> HandlerCounts:
    now = minute_of(queue.now_ms())
    total = HandlerCounts()
    for counts in read.handler_metrics(queue, now - 2, now).values():
        if handler in counts:
            total.add(counts[handler])
    return total


def test_a_running_workers_counts_arrive_within_about_a_second(
    live_queue: Queue, spawn_worker: Any, wait_until: Any
) -> None:
    proc = spawn_worker("w1")
    ids = [live_queue.submit([i], handler="noop").request_id for i in range(40)]
    wait_until(lambda: all(live_queue.state(r) == "done" for r in ids), 15, "the 40 requests")
    finished = time.monotonic()
    wait_until(lambda: done(live_queue, "noop").done == 40, TALLY_FLUSH_S + 2, "40 counted")
    assert time.monotonic() - finished < TALLY_FLUSH_S + 2
    c = done(live_queue, "noop")
    assert (c.runs, c.failed) == (40, 0) and c.run_us > 0  # timed, in the histogram
    assert proc.poll() is None  # sent by the running worker, not at its exit

    # What it ran last is counted by the time it has stopped.
    more = [live_queue.submit([i], handler="noop").request_id for i in range(5)]
    wait_until(lambda: all(live_queue.state(r) == "done" for r in more), 15, "5 more")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert done(live_queue, "noop").done == 45

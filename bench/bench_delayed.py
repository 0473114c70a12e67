"""Delayed requests (issue 19, item 1): how late a delayed request starts, with 100,000 of
them scheduled. Prints a table and JSON.

    .venv/bin/python bench/bench_delayed.py [--requests 100000] [--workers 2] [--json-only]

Three measures, each on its own redis-server (append-only file, fsync everysec, as `make
run` runs it) on a free port, with worker processes that loop as `runworker` does (dequeue
with idle handoff; when idle, block on handoff + wake for at most 1 s or until the next due
time the engine reports):

- backlog: `--requests` requests scheduled hours ahead, and 500 probe requests due over the
  next 10 s: lateness of each probe (its first lease minus its due time). Shows that the
  wait does not grow with how many are scheduled.
- burst: `--requests` requests all due at the same instant: lateness of the first, median,
  p99 and last lease, and the promotion rate.
- idle cost: Redis commands per idle dequeue with nothing scheduled, and with `--requests`
  scheduled but none due (the hot path pays nothing for them).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.queue import Queue, read  # noqa: E402
from core.queue.client import wait_for_any  # noqa: E402
from core.queue.connect import connect  # noqa: E402
from core.stack.redis_server import start_redis  # noqa: E402

TARGET_LATE_MS = 1000  # due within 1 s of its time
PROBES = 500
PROBE_SPAN_MS = 10_000


def worker(url: str, name: str, stop_at: float, out: Any) -> None:
    """A worker loop as runworker's: lease up to 64, ack them, idle-wait on handoff + wake."""
    q = Queue.from_url(url, "bench")
    late: list[int] = []
    acks: list[str] = []
    while time.time() < stop_at:
        _, got, due = q.ack_and_dequeue(name, 64, acks, idle_handoff=True)
        acks = []
        if not got:
            timeout = 1.0 if due < 0 else min(1.0, max(due / 1000, 0.001))
            woken = wait_for_any([q], timeout, name)
            if woken is None or not woken[1]:
                continue
            got = woken[1]
        t = int(time.time() * 1000)
        late += [t - lease.payload["due"] for lease in got]
        acks = [lease.lease for lease in got]
    if acks:
        q.ack_many(acks)
    q.leave_idle(name)
    out.put(late)


def run_workers(url: str, n: int, seconds: float) -> tuple[list[mp.Process], Any, float]:
    out: Any = mp.Queue()
    stop_at = time.time() + seconds
    procs = [mp.Process(target=worker, args=(url, f"w{i}", stop_at, out)) for i in range(n)]
    for p in procs:
        p.start()
    return procs, out, stop_at


def collect(procs: list[mp.Process], out: Any) -> list[int]:
    late: list[int] = []
    for _ in procs:
        late += out.get()
    for p in procs:
        p.join()
    return late


def pct(values: list[int], p: float) -> int:
    s = sorted(values)
    return s[min(len(s) - 1, int(p * len(s)))] if s else -1


def submit_scheduled(q: Queue, n: int, due_of: Any) -> float:
    """n one-task requests, each due at due_of(i) (ms); returns submits per second."""
    t0 = time.perf_counter()
    for i in range(n):
        due = due_of(i)
        q.submit([{"due": due}], handler="noop",
                 run_at=datetime.fromtimestamp(due / 1000, UTC))
    return n / (time.perf_counter() - t0)


def backlog(n: int, workers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = start_redis(Path(tmp), appendonly=True, fsync="everysec")
        try:
            client = connect(server.url, cluster=False)
            q = Queue(client, "bench")
            far = q.now_ms() + 3 * 3_600_000
            rate = submit_scheduled(q, n, lambda i: far + i)
            procs, out, _ = run_workers(server.url, workers, PROBE_SPAN_MS / 1000 + 6)
            time.sleep(1.0)  # the workers idle, blocked on handoff + wake
            start = q.now_ms() + 1000
            step = PROBE_SPAN_MS // PROBES
            for i in range(PROBES):
                due = start + i * step
                q.submit([{"due": due}], handler="noop",
                         run_at=datetime.fromtimestamp(due / 1000, UTC))
            late = collect(procs, out)
            left = read.stats(q).scheduled
        finally:
            server.stop()
    return {"scheduled": n, "submit_delayed_per_s": round(rate), "probes": len(late),
            "probe_late_p50_ms": pct(late, 0.5), "probe_late_p99_ms": pct(late, 0.99),
            "probe_late_max_ms": max(late) if late else -1, "still_scheduled": left}


def burst(n: int, workers: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        server = start_redis(Path(tmp), appendonly=True, fsync="everysec")
        try:
            client = connect(server.url, cluster=False)
            q = Queue(client, "bench")
            # All due at one instant once they are all in: the submit rate, measured on
            # another queue of the same server, says how long that takes.
            warm = Queue(client, "warm")
            far = q.now_ms() + 3_600_000
            warm_rate = submit_scheduled(warm, 2000, lambda i: far)
            due = q.now_ms() + int(n / warm_rate * 1300) + 2000
            rate = submit_scheduled(q, n, lambda i: due)
            wait = max((due - q.now_ms()) / 1000, 0) + 30
            procs, out, _ = run_workers(server.url, workers, wait)
            late = collect(procs, out)
        finally:
            server.stop()
    return {"due_at_once": n, "submit_delayed_per_s": round(rate), "leased": len(late),
            "first_late_ms": min(late) if late else -1, "late_p50_ms": pct(late, 0.5),
            "late_p99_ms": pct(late, 0.99), "last_late_ms": max(late) if late else -1,
            "promoted_per_s": round(len(late) / max(max(late) / 1000, 0.001)) if late else 0}


def idle_cost(n: int) -> dict[str, Any]:
    def per_call(client: Any, q: Queue, calls: int = 2000) -> float:
        before = read.command_stats(client)
        for _ in range(calls):
            q.ack_and_dequeue("idle", 1)
        after = read.command_stats(client)
        inner = sum(n - before.get(k, (0, 0))[0]
                    for k, (n, _) in after.items() if k not in ("fcall", "info"))
        return inner / calls

    with tempfile.TemporaryDirectory() as tmp:
        server = start_redis(Path(tmp), appendonly=True, fsync="everysec")
        try:
            client = connect(server.url, cluster=False)
            q = Queue(client, "bench")
            q.prepare()
            none = per_call(client, q)
            far = q.now_ms() + 3 * 3_600_000
            submit_scheduled(q, n, lambda i: far + i)
            with_n = per_call(client, q)
        finally:
            server.stop()
    return {"commands_per_idle_dequeue_nothing_scheduled": none,
            f"commands_per_idle_dequeue_{n}_scheduled": with_n}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {
        "backlog": backlog(args.requests, args.workers),
        "burst": burst(args.requests, args.workers),
        "idle_cost": idle_cost(args.requests),
        "target_late_ms": TARGET_LATE_MS,
    }
    if not args.json_only:
        table = Table(title=f"Delayed requests ({args.requests:,}, {args.workers} workers)")
        table.add_column("measure")
        table.add_column("value", justify="right")
        for part in ("backlog", "burst", "idle_cost"):
            for k, v in results[part].items():
                table.add_row(f"{part}.{k}", f"{v:,.2f}" if isinstance(v, float) else f"{v:,}")
        Console(stderr=True, width=120).print(table)
    print(json.dumps(results, indent=2))
    return 0 if results["backlog"]["probe_late_p99_ms"] <= TARGET_LATE_MS else 1


if __name__ == "__main__":
    sys.exit(main())

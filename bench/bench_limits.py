"""Limits on keys, measured (issue 37): real `runworker` processes (4 workers of 4 slots by default)
against a queue where a resource is limited to RATE starts a second while other work has no
limit. Prints JSON and a table:

- the most starts of the limited key in any one-second window, by the Redis time of each
  lease (read from the limit's own window set, polled often enough to see every lease);
- the unlimited work's rate with the limited key beside it, against a run without it
  (same tasks, same workers, same sitting);
- the engine's time per lease (FCALL µs per task, Redis CPU µs per task) of one-task
  requests leased by one worker, without a limit and with one limit that applies to every
  lease but never holds one back.

    .venv/bin/python bench/bench_limits.py [--rate 100] [--keyed 2000] [--free 40000]
                                          [--workers 4] [--slots 4] [--json-only]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_queue import run_workers, start_workers, wait_until  # noqa: E402
from core.queue import Queue, read  # noqa: E402
from core.queue.connect import connect  # noqa: E402
from core.stack.redis_server import start_redis  # noqa: E402

BATCH = 100  # free tasks per request


def submit_free(q: Queue, n: int) -> None:
    for i in range(0, n, BATCH):
        q.submit([None] * min(BATCH, n - i), handler="noop", concurrency=BATCH)


def starts_seen(q: Queue, name: str, stop: threading.Event, seen: dict[str, int]) -> None:
    """Every lease the limit's window set holds, polled: each stays in it a second."""
    while not stop.is_set():
        seen.update(read.limit_starts(q, name))
        stop.wait(0.1)


def max_in_window(times: list[int], window_ms: int = 1000) -> int:
    times = sorted(times)
    best, j = 0, 0
    for i, t in enumerate(times):
        while times[j] <= t - window_ms:
            j += 1
        best = max(best, i - j + 1)
    return best


def free_rate(server: Any, q: Queue, free: int, workers: int, slots: int,
              keyed_rid: str | None) -> float:
    """Run the workers (burst) until the free tasks are done: their rate, tasks a second."""
    procs = start_workers(server, q.keys.prefix, q.name, workers, "--burst", "--slots",
                          str(slots))
    try:
        def free_done() -> int:
            done = read.totals(q).get("done", 0)
            if keyed_rid:
                info = read.request(q, keyed_rid)
                done -= info.done if info else 0
            return done

        wait_until(lambda: free_done() > 0, 60, "the first free task")
        t0, d0 = time.perf_counter(), free_done()
        wait_until(lambda: free_done() >= free, 600, "the free tasks")
        elapsed = time.perf_counter() - t0
        for p in procs:
            p.wait(600)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return (free - d0) / elapsed


def bench_rate(server: Any, client: Any, args: argparse.Namespace) -> dict[str, Any]:
    base = Queue(client, "unlimited", prefix="bl")
    submit_free(base, args.free)
    unlimited = free_rate(server, base, args.free, args.workers, args.slots, None)
    q = Queue(client, "limited", prefix="bl")
    q.set_limit("api", on="resource", value="api", rate=args.rate, per=1.0)
    q.submit([None] * args.keyed, request_id="keyed", handler="noop", resources=["api"],
             concurrency=1_000_000)
    submit_free(q, args.free)
    seen: dict[str, int] = {}
    stop = threading.Event()
    poller = threading.Thread(target=starts_seen, args=(q, "api", stop, seen), daemon=True)
    poller.start()
    t0 = time.perf_counter()
    limited = free_rate(server, q, args.free, args.workers, args.slots, "keyed")
    wait_until(lambda: q.state("keyed") == "done", 3600, "the keyed tasks")
    keyed_s = time.perf_counter() - t0
    stop.set()
    poller.join()
    times = list(seen.values())
    return {
        "rate_limit_per_s": args.rate,
        "keyed_tasks": args.keyed,
        "keyed_leases_seen": len(times),
        "keyed_max_starts_in_any_1s_window": max_in_window(times),
        "keyed_seconds": round(keyed_s, 1),
        "free_tasks_per_s_unlimited": round(unlimited),
        "free_tasks_per_s_beside_limited_key": round(limited),
        "free_rate_ratio": round(limited / unlimited, 3),
    }


def bench_cost(server: Any, client: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One-task requests leased by one worker, with no limit and with a limit on the queue
    that never binds (every lease pays its check and its window), in turns."""
    out: dict[str, list[float]] = {"none_fcall": [], "none_cpu": [], "one_fcall": [],
                                   "one_cpu": []}
    for r in range(args.rounds):
        for kind in ("none", "one"):
            q = Queue(client, f"cost-{kind}-{r}", prefix="bl")
            if kind == "one":
                q.set_limit("wide", on="queue", rate=10**9, per=1.0)
            for _ in range(args.one_task):
                q.submit([None], handler="noop")
            run = run_workers(server, client, q, args.one_task, 1)
            out[f"{kind}_fcall"].append(run.script_us / run.tasks)
            out[f"{kind}_cpu"].append(run.redis_cpu_us / run.tasks)
    med = {k: statistics.median(v) for k, v in out.items()}
    return {
        "lease_fcall_us_per_task_no_limit": round(med["none_fcall"], 2),
        "lease_fcall_us_per_task_one_limit": round(med["one_fcall"], 2),
        "lease_fcall_us_added_by_one_limit": round(med["one_fcall"] - med["none_fcall"], 2),
        "redis_cpu_us_added_by_one_limit": round(med["one_cpu"] - med["none_cpu"], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--keyed", type=int, default=2000)
    parser.add_argument("--free", type=int, default=40_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--one-task", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()
    server = start_redis(Path(tempfile.mkdtemp(prefix="bench-limits-")), appendonly=True,
                         fsync="everysec")
    client = connect(server.url)
    try:
        results = {**bench_rate(server, client, args), **bench_cost(server, client, args)}
    finally:
        server.stop()
    if not args.json_only:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="limits on keys", title_justify="left")
        table.add_column("measure")
        table.add_column("value", justify="right")
        targets = {"keyed_max_starts_in_any_1s_window": f"≤ {args.rate}",
                   "free_rate_ratio": "≥ 0.95", "lease_fcall_us_added_by_one_limit": "≤ 2"}
        table.add_column("target", justify="right")
        for k, v in results.items():
            table.add_row(k, f"{v:,}" if isinstance(v, int) else str(v), targets.get(k, ""))
        Console(stderr=True).print(table)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Queue benchmarks: batched enqueue, no-op throughput with 1 and 2 worker processes, and
submit -> handler-start latency at a light steady rate. Prints a table and JSON.

    .venv/bin/python bench/bench_queue.py [--tasks 200000] [--json-only]

Runs its own redis-server (the embedded default's settings: append-only file, fsync every
second) on a free port and real `manage.py runworker` processes; nothing else is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.queue import Queue, introspect  # noqa: E402
from core.redis_server import RedisServer, start_redis  # noqa: E402

TARGETS = {
    "enqueue_tasks_per_s": 250_000,
    "noop_tasks_per_s_1_worker": 25_000,
    "latency_p50_ms": 0.3,
    "latency_p99_ms": 1.0,
    "round_trips_per_task": 2.0,
}


def start_workers(
    server: RedisServer, prefix: str, queue: str, n: int, *extra: str
) -> list[subprocess.Popen[bytes]]:
    env = os.environ | {
        "REDIS_URL": server.url,
        "QUEUE_PREFIX": prefix,
        "DJANGO_SETTINGS_MODULE": "queueadmin.settings",
    }
    return [
        subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "runworker",
                "--queue",
                queue,
                "--import",
                "bench.handlers",
                "--log-level",
                "WARNING",
                *extra,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        for _ in range(n)
    ]


def wait_until(cond: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.001)


def top_level_calls(client: redis.Redis) -> int:
    """EVALSHA + BLPOP calls so far: commands a client sends itself (scripts cannot send
    either), so their count is the clients' round trips on the hot path."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "blpop"))


def bench_enqueue(
    client: redis.Redis, prefix: str, batch: int = 20_000, repeats: int = 7
) -> dict[str, Any]:
    q = Queue(client, "enqueue", prefix=prefix)
    payloads = [
        {"chunk": i, "path": f"s3://bucket/input/part-{i:05d}.parquet"} for i in range(batch)
    ]
    q.submit(payloads[:10], handler="noop")  # load the script
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        q.submit(payloads, handler="noop")
        rates.append(batch / (time.perf_counter() - started))
    return {
        "enqueue_tasks_per_s": round(statistics.median(rates)),
        "enqueue_batch": batch,
        "enqueue_runs": [round(r) for r in rates],
    }


def bench_throughput(
    server: RedisServer, client: redis.Redis, prefix: str, tasks: int, workers: int
) -> dict[str, Any]:
    name = f"noop{workers}"
    q = Queue(client, name, prefix=prefix)
    for i in range(0, tasks, 100_000):
        q.submit([None] * min(100_000, tasks - i), handler="noop", request_id=f"r{i}")
    procs = start_workers(server, prefix, name, workers, "--burst")
    try:
        done = lambda: int(client.hget(q.keys.stats, "done") or 0)  # noqa: E731
        wait_until(lambda: done() > 0, 60, "the first ack")
        t0, d0, c0 = time.perf_counter(), done(), top_level_calls(client)
        wait_until(lambda: done() >= tasks, 600, "all tasks done")
        elapsed = time.perf_counter() - t0
        calls = top_level_calls(client) - c0
        for p in procs:
            p.wait(60)
            if p.returncode != 0:
                raise RuntimeError(p.stderr.read().decode() if p.stderr else "worker failed")
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
    assert introspect.drained(q)
    measured = tasks - d0
    return {
        f"noop_tasks_per_s_{workers}_worker{'s' if workers > 1 else ''}": round(measured / elapsed),
        f"round_trips_per_task_{workers}": round(calls / measured, 4),
    }


def bench_latency(
    server: RedisServer, client: redis.Redis, prefix: str, n: int = 2000, rate: float = 200.0
) -> dict[str, Any]:
    q = Queue(client, "latency", prefix=prefix)
    key = f"{prefix}:latency-samples"
    procs = start_workers(server, prefix, "latency", 1)
    try:
        q.submit([{"key": key, "t": time.time_ns()}], handler="latency", request_id="warmup")
        wait_until(lambda: client.llen(key) == 1, 60, "the worker to start")
        client.delete(key)
        interval = 1.0 / rate
        next_at = time.perf_counter()
        for i in range(n):
            # Sleep most of the gap, then spin the last 0.5 ms: a sleep's wake-up jitter would
            # shift the submit time, and spinning the whole gap would take a core from the
            # worker and Redis on a 2-core machine.
            if (gap := next_at - time.perf_counter()) > 0.0005:
                time.sleep(gap - 0.0005)
            while time.perf_counter() < next_at:
                pass
            q.submit([{"key": key, "t": time.time_ns()}], handler="latency", request_id=f"l{i}")
            next_at += interval
        wait_until(lambda: client.llen(key) >= n, 60, "all latency samples")
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
    samples = sorted(int(x) / 1e6 for x in client.lrange(key, 0, -1))
    return {
        "latency_p50_ms": round(samples[len(samples) // 2], 3),
        "latency_p99_ms": round(samples[int(len(samples) * 0.99)], 3),
        "latency_max_ms": round(samples[-1], 3),
        "latency_samples": len(samples),
        "latency_rate_per_s": rate,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=200_000, help="no-op tasks per throughput run")
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="qa-bench-") as tmp:
        server = start_redis(Path(tmp), appendonly=True, fsync="everysec")
        try:
            client = redis.Redis.from_url(server.url, decode_responses=True)
            results: dict[str, Any] = {
                "machine": f"{os.cpu_count()} cores",
                "redis": client.info("server")["redis_version"],
            }
            results |= bench_enqueue(client, "b1")
            results |= bench_throughput(server, client, "b2", args.tasks, 1)
            results |= bench_throughput(server, client, "b3", args.tasks, 2)
            results |= bench_latency(server, client, "b4")
            results["round_trips_per_task"] = results["round_trips_per_task_1"]
        finally:
            server.stop()
    if not args.json_only:
        table = Table(title="queueadmin queue benchmark")
        table.add_column("measure")
        table.add_column("result", justify="right")
        table.add_column("target", justify="right")
        table.add_column("", justify="center")
        for key, value in results.items():
            if isinstance(value, list):
                continue
            target = TARGETS.get(key)
            ok = (
                ""
                if target is None
                else (
                    "ok"
                    if (
                        value <= target
                        if "latency" in key or "round_trips" in key
                        else value >= target
                    )
                    else "MISSED"
                )
            )
            table.add_row(
                key,
                f"{value:,}" if isinstance(value, int | float) else str(value),
                "" if target is None else f"{target:,}",
                ok,
            )
        Console(stderr=True).print(table)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

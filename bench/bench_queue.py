"""Queue benchmarks: single submits (ours beside huey and rq, same run, same redis-server),
requests of one task each processed by one worker process, batched enqueue, no-op throughput
with 1 and 2 worker processes, the same with 1,000 and with 1,000,000 tasks waiting behind
(backlog), submit -> handler-start latency at a light steady rate, and what the handlers'
metrics cost (one-task requests with them on and off, in turns, same run). Prints a table
and JSON.

    .venv/bin/python bench/bench_queue.py [--tasks 200000] [--fsync always everysec]
                                          [--only single,one_task,...] [--json-only]

Runs its own redis-server per fsync mode (append-only file, as `make run` runs it; fsync
`always` and `everysec`) on a free port, and real `manage.py runworker` processes (and the
peers' own workers); nothing else is touched. The peers need `pip install -e '.[bench]'`.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import (  # noqa: E402
    HAVE_HUEY,
    HAVE_RQ,
    huey_latency_task,
    make_huey,
    make_rq,
    noop,
)
from core.queue import Queue, introspect  # noqa: E402
from core.queue.metrics import Tally  # noqa: E402
from core.stack.redis_server import RedisServer, start_redis  # noqa: E402

TARGETS = {
    "single_submits_per_s": "≥ huey",
    "one_task_requests_per_s_1_worker": 20_000,
    "enqueue_tasks_per_s": 250_000,
    "noop_tasks_per_s_1_worker": 25_000,
    "backlog_flatness": 0.8,
    "latency_p50_ms": "≤ huey",
    "latency_p99_ms": 1.0,
    "round_trips_per_task": 2.0,
    "metrics_rate_on_vs_off": 0.95,
    "metrics_script_us_per_task_added": 2.0,
    "metrics_redis_cpu_us_per_task_added": 2.0,
    "metrics_ack_batch64_us_per_task_added": 2.0,
    "metrics_ack_batch1_us_per_task_added": 2.0,
}
LOWER_IS_BETTER = ("latency", "round_trips", "_us")
MEASURES = ("single", "one_task", "enqueue", "noop", "backlog", "latency", "metrics")


def start_workers(
    server: RedisServer, prefix: str, queue: str, n: int, *extra: str,
    env_extra: dict[str, str] | None = None,
) -> list[subprocess.Popen[bytes]]:
    env = os.environ | {
        "REDIS_URL": server.url,
        "QUEUE_PREFIX": prefix,
        "DJANGO_SETTINGS_MODULE": "queueadmin.settings",
    } | (env_extra or {})
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


def command_stats(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """Per command: (calls, microseconds spent in Redis) so far."""
    return {
        k.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"]))
        for k, v in client.info("commandstats").items()
    }


def redis_us_per_call(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], commands: tuple[str, ...]
) -> float:
    calls = sum(after.get(c, (0, 0))[0] - before.get(c, (0, 0))[0] for c in commands)
    usec = sum(after.get(c, (0, 0))[1] - before.get(c, (0, 0))[1] for c in commands)
    return round(usec / calls, 1) if calls else 0.0


def top_level_calls(client: redis.Redis) -> int:
    """FCALL (EVALSHA before the engine was a Functions library) + BLPOP calls so far:
    commands a client sends itself (scripts cannot send them), so their count is the
    clients' round trips on the hot path."""
    stats = command_stats(client)
    return sum(stats.get(c, (0, 0))[0] for c in ("fcall", "evalsha", "blpop"))


def bench_single_submits(
    server: RedisServer, client: redis.Redis, prefix: str, n: int = 5000, rounds: int = 3
) -> dict[str, Any]:
    """One producer making `n` one-task submits in a row, ours and each peer's in turns on
    the same redis-server; the median of `rounds` turns each."""
    q = Queue(client, "single", prefix=prefix)
    contenders: dict[str, Any] = {
        "ours": lambda i: q.submit([{"n": i}], handler="noop"),
    }
    commands = {"ours": ("fcall", "evalsha"), "huey": ("lpush",), "rq": ("multi", "hset", "rpush")}
    if HAVE_HUEY:
        huey, task = make_huey(server.url)
        contenders["huey"] = lambda i: task({"n": i})
    if HAVE_RQ:
        rq_queue = make_rq(server.url)
        contenders["rq"] = lambda i: rq_queue.enqueue(noop, {"n": i})
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    redis_us: dict[str, list[float]] = {name: [] for name in contenders}
    for submit in contenders.values():
        for i in range(200):  # warm up: imports, connections, the engine's library
            submit(i)
    for _ in range(rounds):
        for name, submit in contenders.items():
            before = command_stats(client)
            started = time.perf_counter()
            for i in range(n):
                submit(i)
            rates[name].append(n / (time.perf_counter() - started))
            redis_us[name].append(redis_us_per_call(before, command_stats(client), commands[name]))
    if HAVE_HUEY:
        huey.flush()
    if HAVE_RQ:
        rq_queue.empty()
    out: dict[str, Any] = {}
    for name in contenders:
        suffix = "" if name == "ours" else f"_{name}"
        out[f"single_submits_per_s{suffix}"] = round(statistics.median(rates[name]))
        out[f"single_submit_runs{suffix}"] = [round(r) for r in rates[name]]
    out["single_submit_redis_us"] = statistics.median(redis_us["ours"])
    return out


def bench_enqueue(
    client: redis.Redis, prefix: str, batch: int = 20_000, repeats: int = 7
) -> dict[str, Any]:
    q = Queue(client, "enqueue", prefix=prefix)
    payloads = [
        {"chunk": i, "path": f"s3://bucket/input/part-{i:05d}.parquet"} for i in range(batch)
    ]
    q.submit(payloads[:10], handler="noop")  # load the engine
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


def redis_cpu_s(client: redis.Redis) -> float:
    """CPU seconds redis-server's main thread has used so far (user + system): scripts,
    commands, the append-only file's writes and the network, which command stats leave out."""
    cpu = client.info("cpu")
    return float(cpu["used_cpu_user_main_thread"]) + float(cpu["used_cpu_sys_main_thread"])


@dataclass
class Run:
    """What burst workers did between the first ack and the last."""

    elapsed: float  # seconds
    tasks: int  # tasks done in that time
    calls: int  # clients' round trips on the hot path (top_level_calls())
    redis_cpu_us: float  # redis-server's main-thread CPU time (redis_cpu_s())
    script_us: int  # time inside the engine's functions (FCALL), as Redis counts it

    def per_task(self, us: float) -> float:
        return round(us / self.tasks, 1)


def run_workers(
    server: RedisServer, client: redis.Redis, q: Queue, tasks: int, workers: int,
    *extra: str, env_extra: dict[str, str] | None = None,
) -> Run:
    """Run `workers` burst workers until `tasks` are done; measured from the first ack to the
    last. With `extra` "--max-tasks N" they stop there, leaving the rest waiting."""
    procs = start_workers(server, q.keys.prefix, q.name, workers, "--burst", *extra,
                          env_extra=env_extra)
    try:
        done = lambda: int(client.hget(q.keys.stats, "done") or 0)  # noqa: E731
        fcall_us = lambda: command_stats(client).get("fcall", (0, 0))[1]  # noqa: E731
        wait_until(lambda: done() > 0, 60, "the first ack")
        t0, d0, c0 = time.perf_counter(), done(), top_level_calls(client)
        cpu0, us0 = redis_cpu_s(client), fcall_us()
        wait_until(lambda: done() >= tasks, 600, "all tasks done")
        elapsed = time.perf_counter() - t0
        run = Run(elapsed, tasks - d0, top_level_calls(client) - c0,
                  (redis_cpu_s(client) - cpu0) * 1e6, fcall_us() - us0)
        for p in procs:
            p.wait(60)
            if p.returncode != 0:
                raise RuntimeError(p.stderr.read().decode() if p.stderr else "worker failed")
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
    if not extra:
        assert introspect.drained(q)
    return run


def bench_throughput(
    server: RedisServer, client: redis.Redis, prefix: str, tasks: int, workers: int
) -> dict[str, Any]:
    """No-op tasks of a few large requests."""
    q = Queue(client, f"noop{workers}", prefix=prefix)
    for i in range(0, tasks, 100_000):
        q.submit([None] * min(100_000, tasks - i), handler="noop", request_id=f"r{i}")
    run = run_workers(server, client, q, tasks, workers)
    return {
        f"noop_tasks_per_s_{workers}_worker{'s' if workers > 1 else ''}": round(
            run.tasks / run.elapsed
        ),
        f"round_trips_per_task_{workers}": round(run.calls / run.tasks, 4),
    }


def bench_backlog(
    server: RedisServer, client: redis.Redis, prefix: str, measured: int = 50_000,
    left: tuple[int, ...] = (1_000, 1_000_000),
) -> dict[str, Any]:
    """No-op tasks in requests of 100, one worker process: the rate over `measured` tasks when
    1,000 tasks are left waiting behind them, and when 1,000,000 are (10,000 requests in
    rotation, and the streams, hashes and indexes that many make). The engine's cost per
    task must not grow with the backlog."""
    out: dict[str, Any] = {}
    rates = []
    for n in left:
        q = Queue(client, f"backlog{n}", prefix=prefix)
        payloads = [None] * 100
        for _ in range((measured + n) // 100):
            q.submit(payloads, handler="noop")
        run = run_workers(server, client, q, measured, 1, "--max-tasks", str(measured))
        rates.append(run.tasks / run.elapsed)
        name = f"{n // 1_000_000}M" if n >= 1_000_000 else f"{n // 1_000}k"
        out[f"backlog_noop_tasks_per_s_{name}_left"] = round(rates[-1])
    out["backlog_flatness"] = round(rates[-1] / rates[0], 2)
    return out


def bench_one_task_requests(
    server: RedisServer, client: redis.Redis, prefix: str, tasks: int
) -> dict[str, Any]:
    """Requests of one no-op task each, processed by one worker process. Redis's share: the
    CPU time of its main thread (everything it did for them) and, within it, the time in the
    engine's functions."""
    q = Queue(client, "one", prefix=prefix)
    for _ in range(tasks):
        q.submit([None], handler="noop")
    run = run_workers(server, client, q, tasks, 1)
    return {
        "one_task_requests_per_s_1_worker": round(run.tasks / run.elapsed),
        "one_task_round_trips_per_task": round(run.calls / run.tasks, 4),
        "one_task_redis_cpu_us_per_task": run.per_task(run.redis_cpu_us),
        "one_task_script_us_per_task": run.per_task(run.script_us),
    }


def bench_metrics(
    server: RedisServer, client: redis.Redis, prefix: str, tasks: int, rounds: int = 2
) -> dict[str, Any]:
    """What the handlers' metrics cost: one-task requests processed by one worker process
    with them on and off (QA_HANDLER_METRICS=off), in turns on the same server (on, off, off,
    on, ...), the median of `rounds` runs each; and the engine's time per task for an ack sent
    alone (the worst case: no batch to share the metrics' writes) and in a batch of 64 (the
    worker's usual), in turns with and without them."""
    runs: dict[str, list[Run]] = {"on": [], "off": []}
    for r in range(rounds):
        for mode in ("on", "off") if r % 2 == 0 else ("off", "on"):
            q = Queue(client, f"metrics-{mode}-{r}", prefix=prefix)
            for _ in range(tasks):
                q.submit([None], handler="noop")
            runs[mode].append(run_workers(server, client, q, tasks, 1,
                                          env_extra={"QA_HANDLER_METRICS": mode}))
    out: dict[str, Any] = {}
    for mode, measured in runs.items():
        out[f"metrics_{mode}_one_task_requests_per_s"] = round(
            statistics.median(run.tasks / run.elapsed for run in measured))
        out[f"metrics_{mode}_redis_cpu_us_per_task"] = round(statistics.median(
            run.per_task(run.redis_cpu_us) for run in measured), 2)
        out[f"metrics_{mode}_script_us_per_task"] = round(statistics.median(
            run.per_task(run.script_us) for run in measured), 2)
        out[f"metrics_{mode}_runs_per_s"] = [round(run.tasks / run.elapsed) for run in measured]
    out["metrics_rate_on_vs_off"] = round(
        out["metrics_on_one_task_requests_per_s"] / out["metrics_off_one_task_requests_per_s"], 3)
    out["metrics_script_us_per_task_added"] = round(
        out["metrics_on_script_us_per_task"] - out["metrics_off_script_us_per_task"], 2)
    out["metrics_redis_cpu_us_per_task_added"] = round(
        out["metrics_on_redis_cpu_us_per_task"] - out["metrics_off_redis_cpu_us_per_task"], 2)
    for batch in (64, 1):
        costs = _ack_us_per_task(client, prefix, batch)
        out[f"metrics_ack_batch{batch}_us_per_task_on"] = costs["tally"]
        out[f"metrics_ack_batch{batch}_us_per_task_off"] = costs["off"]
        out[f"metrics_ack_batch{batch}_us_per_task_added"] = round(costs["tally"] - costs["off"], 2)
        out[f"metrics_ack_api_batch{batch}_us_per_task_added"] = round(
            costs["tokens"] - costs["off"], 2)
    return out


def _ack_us_per_task(
    client: redis.Redis, prefix: str, batch: int, rounds: int = 101, tasks: int = 64
) -> dict[str, float]:
    """The engine's time (FCALL, as Redis counts it) per task of acking `tasks` timed one-task
    requests, `batch` per call, three ways in turns: without metrics ("off"); as a worker
    does, counting the accepted acks in a Tally, sent by one more call at the round's end
    ("tally": a worker sends it once a second on a call it makes anyway, so this is an upper
    bound); and with a time
    token per ack, as ack() and ack_many() send them ("tokens"). The 10th percentile of
    `rounds` samples each: less exposed to a busy machine than the worker runs (the samples
    that other processes slowed, preempting Redis, are left above it)."""
    queues = {m: Queue(client, f"ack-cost-{m}-{batch}", prefix=prefix, metrics=m != "off")
              for m in ("off", "tally", "tokens")}
    samples: dict[str, list[float]] = {m: [] for m in queues}
    for r in range(rounds + 1):
        for mode in list(queues) if r % 2 else list(queues)[::-1]:
            q = queues[mode]
            for _ in range(tasks):
                q.submit([None], handler="noop")
            leases = q.dequeue("w", tasks)
            before = command_stats(client).get("fcall", (0, 0))[1]
            tally = Tally(flush_s=3600)
            for i in range(0, tasks, batch):
                part = leases[i : i + batch]
                if mode == "tally":
                    q.ack_and_dequeue("w", 0, [x.lease for x in part],
                                      durations=[0.0004] * len(part), tally=tally,
                                      handlers=[x.handler for x in part])
                else:
                    q.ack_many(part, durations=[0.0004] * len(part))
            if mode == "tally":  # the round's counts: one more call (a worker's ride along)
                q.send_tally(tally, force=True)
            if r:  # the first round loads, warms and makes the minute's key
                samples[mode].append(
                    (command_stats(client).get("fcall", (0, 0))[1] - before) / tasks)
    return {m: round(statistics.quantiles(v, n=10)[0], 2) for m, v in samples.items()}


def bench_peer_workers(server: RedisServer, tasks: int) -> dict[str, Any]:
    """The peers' own worker processing one-task jobs: one huey consumer (one thread), one
    rq SimpleWorker (no fork per job), from the first job taken until none is left."""
    env = os.environ | {"BENCH_REDIS_URL": server.url, "PYTHONPATH": str(ROOT)}
    out: dict[str, Any] = {}
    if HAVE_HUEY:
        huey, task = make_huey(server.url)
        for i in range(tasks):
            task(i)
        bin_dir = Path(sys.executable).parent
        proc = subprocess.Popen(
            [
                str(bin_dir / "huey_consumer"),
                "bench.peers.huey",
                "-w",
                "1",
                "-k",
                "thread",
                "-n",
                "-q",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            out["one_task_per_s_huey_1_worker"] = _drain_rate(huey.pending_count)
        finally:
            proc.terminate()
            proc.wait(30)
        huey.flush()
    if HAVE_RQ:
        n = min(tasks, 3_000)  # rq does many round trips a job
        rq_queue = make_rq(server.url)
        for i in range(n):
            rq_queue.enqueue(noop, i, result_ttl=0)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rq.cli",
                "worker",
                "--burst",
                "-q",
                "-w",
                "rq.worker.SimpleWorker",
                "-u",
                server.url,
                "bench",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            out["one_task_per_s_rq_1_worker"] = _drain_rate(lambda: rq_queue.count)
        finally:
            proc.kill() if proc.poll() is None else None
            proc.wait(30)
    return out


def _drain_rate(pending: Any) -> int:
    """Jobs per second a peer's worker (just started) takes from its queue until it is empty."""
    total = pending()
    wait_until(lambda: pending() < total, 60, "the peer's worker to start")
    t0, p0 = time.perf_counter(), pending()
    wait_until(lambda: pending() == 0, 600, "the peer's queue to drain")
    return round(p0 / (time.perf_counter() - t0))


def paced(n: int, rate: float, submit: Any) -> None:
    """Call submit(i) n times at `rate` per second."""
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
        submit(i)
        next_at += interval


def latency_figures(samples_ns: list[str], suffix: str = "") -> dict[str, Any]:
    samples = sorted(int(x) / 1e6 for x in samples_ns)
    return {
        f"latency_p50_ms{suffix}": round(samples[len(samples) // 2], 3),
        f"latency_p99_ms{suffix}": round(samples[int(len(samples) * 0.99)], 3),
        f"latency_max_ms{suffix}": round(samples[-1], 3),
        f"latency_samples{suffix}": len(samples),
    }


def bench_latency(
    server: RedisServer, client: redis.Redis, prefix: str, n: int = 2000, rate: float = 200.0
) -> dict[str, Any]:
    """Submit -> handler start of one-task requests at a light steady rate, one worker
    process waiting; then the same for huey's consumer (one worker thread, blocking on its
    queue), on the same redis-server, so that the two p50s compare."""
    q = Queue(client, "latency", prefix=prefix)
    key = f"{prefix}:latency-samples"
    procs = start_workers(server, prefix, "latency", 1)
    try:
        q.submit([{"key": key, "t": time.time_ns()}], handler="latency", request_id="warmup")
        wait_until(lambda: client.llen(key) == 1, 60, "the worker to start")
        client.delete(key)
        paced(n, rate, lambda i: q.submit(
            [{"key": key, "t": time.time_ns()}], handler="latency", request_id=f"l{i}"))
        wait_until(lambda: client.llen(key) >= n, 60, "all latency samples")
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
    out = latency_figures(client.lrange(key, 0, -1)) | {"latency_rate_per_s": rate}
    if HAVE_HUEY:
        out |= bench_huey_latency(server, client, f"{prefix}:huey-latency-samples", n, rate)
    return out


def bench_huey_latency(
    server: RedisServer, client: redis.Redis, key: str, n: int, rate: float
) -> dict[str, Any]:
    huey, _ = make_huey(server.url)
    task = huey_latency_task(huey)
    env = os.environ | {"BENCH_REDIS_URL": server.url, "PYTHONPATH": str(ROOT)}
    consumer = Path(sys.executable).parent / "huey_consumer"
    proc = subprocess.Popen(
        [str(consumer), "bench.peers.huey", "-w", "1", "-k", "thread", "-n", "-q"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        task(key, time.time_ns())
        wait_until(lambda: client.llen(key) == 1, 60, "huey's consumer to start")
        client.delete(key)
        paced(n, rate, lambda i: task(key, time.time_ns()))
        wait_until(lambda: client.llen(key) >= n, 60, "all of huey's latency samples")
    finally:
        proc.terminate()
        proc.wait(30)
    huey.flush()
    return latency_figures(client.lrange(key, 0, -1), "_huey")


def run_all(fsync: str, args: argparse.Namespace, only: set[str]) -> dict[str, Any]:
    """Every chosen measure on one fresh redis-server with appendfsync `fsync`."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="qa-bench-") as tmp:
        server = start_redis(Path(tmp), appendonly=True, fsync=fsync)
        try:
            client = redis.Redis.from_url(server.url, decode_responses=True)
            if "single" in only:
                results |= bench_single_submits(server, client, "b0", args.submits)
            if "one_task" in only:
                results |= bench_one_task_requests(server, client, "b5", args.one_task)
                if args.peers:
                    results |= bench_peer_workers(server, args.one_task)
            if "enqueue" in only:
                results |= bench_enqueue(client, "b1")
            if "metrics" in only:
                results |= bench_metrics(server, client, "b7", args.one_task)
            if "noop" in only:
                results |= bench_throughput(server, client, "b2", args.tasks, 1)
                results |= bench_throughput(server, client, "b3", args.tasks, 2)
                results["round_trips_per_task"] = results["round_trips_per_task_1"]
            results["redis"] = client.info("server")["redis_version"]
        finally:
            server.stop()
        if "backlog" in only:
            # Its own server too: a million tasks make hundreds of MB of append-only file.
            with tempfile.TemporaryDirectory(prefix="qa-bench-") as tmp2:
                server = start_redis(Path(tmp2), appendonly=True, fsync=fsync)
                try:
                    client = redis.Redis.from_url(server.url, decode_responses=True)
                    results |= bench_backlog(server, client, "b6")
                finally:
                    server.stop()
        if "latency" in only:
            # A server of its own: on the first one, after the throughput runs had written
            # hundreds of MB to its append-only file, fsync always gave 28-34 ms p50 with
            # either engine (the disk catching up, not the hand-off) against ~1 ms here.
            server = start_redis(Path(tmp) / "latency", appendonly=True, fsync=fsync)
            try:
                client = redis.Redis.from_url(server.url, decode_responses=True)
                results |= bench_latency(server, client, "b4")
                results["redis"] = client.info("server")["redis_version"]
            finally:
                server.stop()
    return results


def verdict(key: str, value: Any, results: dict[str, Any]) -> tuple[str, str]:
    """(target shown, ok/MISSED/"") for one measure."""
    target = TARGETS.get(key)
    if target is None:
        return "", ""
    if target == "≥ huey":
        peer = results.get("single_submits_per_s_huey")
        return (target, "" if peer is None else ("ok" if value >= peer else "MISSED"))
    if target == "≤ huey":
        peer = results.get(f"{key}_huey")
        return (target, "" if peer is None else ("ok" if value <= peer else "MISSED"))
    lower = any(word in key for word in LOWER_IS_BETTER)
    return f"{target:,}", "ok" if (value <= target if lower else value >= target) else "MISSED"


def print_table(results: dict[str, Any]) -> None:
    modes = [m for m in results if isinstance(results[m], dict)]
    table = Table(
        title=f"queueadmin queue benchmark ({results['machine']}, Redis {results['redis']})"
    )
    table.add_column("measure", no_wrap=True)
    for mode in modes:
        table.add_column(f"fsync {mode}", justify="right")
        table.add_column("", justify="center")
    table.add_column("target", justify="right")
    keys: list[str] = []
    for mode in modes:
        keys += [
            k for k in results[mode] if k not in keys and not isinstance(results[mode][k], list)
        ]
    for key in keys:
        if key == "redis":
            continue
        row, shown = [key], ""
        for mode in modes:
            value = results[mode].get(key)
            target, ok = verdict(key, value, results[mode]) if value is not None else ("", "")
            shown = shown or target
            row += ["" if value is None else f"{value:,}", ok]
        table.add_row(*row, shown)
    Console(stderr=True, width=140).print(table)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=200_000, help="no-op tasks per throughput run")
    parser.add_argument("--submits", type=int, default=5_000, help="single submits per turn")
    parser.add_argument("--one-task", type=int, default=20_000, help="one-task requests to process")
    parser.add_argument(
        "--fsync",
        nargs="+",
        default=["always", "everysec"],
        choices=["always", "everysec"],
        help="appendfsync modes to run under",
    )
    parser.add_argument(
        "--only",
        default=",".join(MEASURES),
        help=f"comma-separated measures among {', '.join(MEASURES)}",
    )
    parser.add_argument(
        "--no-peers",
        dest="peers",
        action="store_false",
        help="skip the peers' workers (their submits are always measured)",
    )
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()
    only = set(args.only.split(","))
    if unknown := only - set(MEASURES):
        parser.error(f"unknown measure(s): {', '.join(sorted(unknown))}")
    results: dict[str, Any] = {"machine": f"{os.cpu_count()} cores"}
    for fsync in args.fsync:
        results[fsync] = run_all(fsync, args, only)
        results["redis"] = results[fsync].pop("redis")
    if not args.json_only:
        print_table(results)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

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
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import (  # noqa: E402
    HAVE_HUEY,
    HAVE_RQ,
    huey_clear_samples,
    huey_latency_task,
    huey_sample_count,
    huey_samples,
    make_huey,
    make_rq,
    noop,
)
from core.queue import Queue, UnknownHandlerWarning, read  # noqa: E402
from core.queue.connect import Client, connect  # noqa: E402
from core.queue.metrics import Tally  # noqa: E402
from core.stack.redis_server import RedisServer, start_redis  # noqa: E402

TARGETS = {
    "single_submits_per_s": "≥ huey",
    # Issue 37's (item 3), on a quiet 2-core machine.
    "one_task_requests_per_s_1_worker": 30_000,
    "enqueue_tasks_per_s": 400_000,
    "noop_tasks_per_s_1_worker": 80_000,
    "one_task_requests_per_s_1_worker_spread_pct": 10.0,
    "noop_tasks_per_s_1_worker_spread_pct": 10.0,
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
LOWER_IS_BETTER = ("latency", "round_trips", "_us", "spread")
MEASURES = ("single", "one_task", "enqueue", "noop", "backlog", "latency", "flood", "metrics",
            "tracing")


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


def wait_until(cond: Any, timeout: float, what: str, every: float = 0.001) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(every)


def redis_us_per_call(
    before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], commands: tuple[str, ...]
) -> float:
    calls = sum(after.get(c, (0, 0))[0] - before.get(c, (0, 0))[0] for c in commands)
    usec = sum(after.get(c, (0, 0))[1] - before.get(c, (0, 0))[1] for c in commands)
    return round(usec / calls, 1) if calls else 0.0


def bench_single_submits(
    server: RedisServer, client: Client, prefix: str, n: int = 5000, rounds: int = 3,
    peers: bool = True,
) -> dict[str, Any]:
    """One producer making `n` one-task submits in a row, ours and each peer's in turns on
    the same redis-server; the median of `rounds` turns each. The producer's CPU per submit
    (this process's, which the load disturbs less than the rate) beside the rate."""
    q = Queue(client, "single", prefix=prefix)
    contenders: dict[str, Any] = {
        "ours": lambda i: q.submit([{"n": i}], handler="noop"),
    }
    commands = {"ours": ("fcall", "evalsha"), "huey": ("lpush",), "rq": ("multi", "hset", "rpush")}
    if HAVE_HUEY and peers:
        huey, task = make_huey(server.url)
        contenders["huey"] = lambda i: task({"n": i})
    if HAVE_RQ and peers:
        rq_queue = make_rq(server.url)
        contenders["rq"] = lambda i: rq_queue.enqueue(noop, {"n": i})
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    redis_us: dict[str, list[float]] = {name: [] for name in contenders}
    cpu_us: dict[str, list[float]] = {name: [] for name in contenders}
    for submit in contenders.values():
        for i in range(200):  # warm up: imports, connections, the engine's library
            submit(i)
    for _ in range(rounds):
        for name, submit in contenders.items():
            before = read.command_stats(client)
            started, cpu = time.perf_counter(), time.process_time()
            for i in range(n):
                submit(i)
            rates[name].append(n / (time.perf_counter() - started))
            cpu_us[name].append((time.process_time() - cpu) * 1e6 / n)
            after = read.command_stats(client)
            redis_us[name].append(redis_us_per_call(before, after, commands[name]))
    if "huey" in contenders:
        huey.flush()
    if "rq" in contenders:
        rq_queue.empty()
    out: dict[str, Any] = {}
    for name in contenders:
        suffix = "" if name == "ours" else f"_{name}"
        out[f"single_submits_per_s{suffix}"] = round(statistics.median(rates[name]))
        out[f"single_submit_runs{suffix}"] = [round(r) for r in rates[name]]
    out["single_submit_redis_us"] = statistics.median(redis_us["ours"])
    out["single_submit_client_cpu_us"] = round(statistics.median(cpu_us["ours"]), 1)
    return out


def bench_enqueue(
    client: Client, prefix: str, batch: int = 20_000, repeats: int = 7
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


@dataclass
class Run:
    """What burst workers did between the first ack and the last: the rate, and what the
    tasks cost in units a busy machine disturbs little (CPU time and commands, not time)."""

    elapsed: float  # seconds
    tasks: int  # tasks done in that time
    calls: int  # clients' round trips on the hot path: FCALL and BLPOP (scripts send none)
    redis_cpu_us: float  # redis-server's main-thread CPU time (read.cpu_seconds())
    script_us: int  # time inside the engine's functions (FCALL), as Redis counts it (wall)
    worker_cpu_us: float  # the workers' CPU, their heartbeat processes' included
    commands: int  # commands Redis ran for them, those the engine's scripts send included

    def per_task(self, us: float) -> float:
        return round(us / self.tasks, 1)

    def costs(self, prefix: str) -> dict[str, float]:
        """The load-robust figures per task: on a quiet 2-core machine the rate is about
        1e6 / max(worker CPU, Redis CPU) per task (the two run on their own cores)."""
        return {
            f"{prefix}worker_cpu_us_per_task": round(self.worker_cpu_us / self.tasks, 2),
            f"{prefix}redis_cpu_us_per_task": round(self.redis_cpu_us / self.tasks, 2),
            f"{prefix}fcall_us_per_task": round(self.script_us / self.tasks, 2),
            f"{prefix}commands_per_task": round(self.commands / self.tasks, 2),
        }


# Commands the bench itself sends while workers run (its polls and reads), not counted as the
# tasks' commands; the engine's scripts send none of these but HGETALL, and the polls'
# HGETALLs are counted and taken off.
BENCH_COMMANDS = ("info", "fcall", "evalsha", "pipeline", "multi", "exec", "ping", "client",
                  "hello", "function")
_TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live (or not yet waited) process and its descendants
    (a worker's heartbeat process), read from /proc: 10 ms ticks."""
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / _TICK  # utime stime cutime cstime
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def wait_exited(pid: int, timeout: float) -> None:
    """Until the child `pid` has exited, without reaping it (its /proc entry stays)."""
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"worker {pid} did not exit within {timeout} s")
        time.sleep(0.01)


def engine_commands(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
                    polls: int) -> int:
    """Commands Redis ran between two command_stats() reads, those scripts send included,
    less the bench's own (BENCH_COMMANDS, and one HGETALL per poll)."""
    n = sum(calls - before.get(c, (0, 0))[0] for c, (calls, _) in after.items()
            if c not in BENCH_COMMANDS)
    return n - polls


def run_workers(
    server: RedisServer, client: Client, q: Queue, tasks: int, workers: int,
    *extra: str, env_extra: dict[str, str] | None = None, cpu_at_exit: bool = False,
) -> Run:
    """Run `workers` burst workers until `tasks` are done, measured from the first ack to the
    last: the rate, and what the tasks cost in CPU and commands. With `extra` "--max-tasks N"
    they stop there, leaving the rest waiting. With `cpu_at_exit` the workers' CPU is read
    once they have exited (what they do at their stop included: e.g. exporting the spans
    still buffered), not at the last ack."""
    polls = 0

    def done() -> int:
        nonlocal polls
        polls += 1
        return read.totals(q).get("done", 0)

    procs = start_workers(server, q.keys.prefix, q.name, workers, "--burst", *extra,
                          env_extra=env_extra)
    try:
        wait_until(lambda: done() > 0, 60, "the first ack", 0.002)
        t0, d0 = time.perf_counter(), done()
        wcpu0 = sum(tree_cpu_s(p.pid) for p in procs)
        s0, rcpu0 = read.command_stats(client), read.cpu_seconds(client)
        polls = 0
        wait_until(lambda: done() >= tasks, 600, "all tasks done", 0.002)
        elapsed = time.perf_counter() - t0
        if cpu_at_exit:
            for p in procs:
                wait_exited(p.pid, 60)
        wcpu1 = sum(tree_cpu_s(p.pid) for p in procs)  # exited: not waited yet, still there
        s1, rcpu1 = read.command_stats(client), read.cpu_seconds(client)
        fcall = s1.get("fcall", (0, 0))[1] - s0.get("fcall", (0, 0))[1]
        calls = sum(s1.get(c, (0, 0))[0] - s0.get(c, (0, 0))[0]
                    for c in ("fcall", "evalsha", "blpop"))
        n = tasks - d0
        run = Run(elapsed, n, calls, (rcpu1 - rcpu0) * 1e6, fcall, (wcpu1 - wcpu0) * 1e6,
                  engine_commands(s0, s1, polls))
        for p in procs:
            p.wait(60)
            if p.returncode != 0:
                raise RuntimeError(p.stderr.read().decode() if p.stderr else "worker failed")
    finally:
        for p in procs:
            p.kill() if p.poll() is None else None
    if not extra:
        assert read.drained(q)
    return run


def rounds_summary(runs: list[Run], rate_key: str, cost_prefix: str) -> dict[str, Any]:
    """The median rate of several rounds, its spread (± half the range, % of the median) and
    each round's rate; the costs per task of the least disturbed round (the lowest of each:
    other processes on the machine only ever add to them)."""
    rates = [run.tasks / run.elapsed for run in runs]
    mid = statistics.median(rates)
    out: dict[str, Any] = {rate_key: round(mid)}
    if len(runs) > 1:
        out[f"{rate_key}_spread_pct"] = round(50 * (max(rates) - min(rates)) / mid, 1)
        out[f"{rate_key}_runs"] = [round(r) for r in rates]
    costs = [run.costs(cost_prefix) for run in runs]
    return out | {k: min(c[k] for c in costs) for k in costs[0]}


def bench_throughput(
    server: RedisServer, client: Client, prefix: str, tasks: int, workers: int,
    rounds: int = 1,
) -> dict[str, Any]:
    """No-op tasks of a few large requests, `rounds` times on fresh queues."""
    runs = []
    for r in range(rounds):
        q = Queue(client, f"noop{workers}-{r}", prefix=prefix)
        for i in range(0, tasks, 100_000):
            q.submit([None] * min(100_000, tasks - i), handler="noop", request_id=f"r{i}")
        runs.append(run_workers(server, client, q, tasks, workers))
    plural = "s" if workers > 1 else ""
    return rounds_summary(runs, f"noop_tasks_per_s_{workers}_worker{plural}",
                          f"noop_{workers}w_") | {
        f"round_trips_per_task_{workers}": round(runs[0].calls / runs[0].tasks, 4),
    }


def bench_backlog(
    server: RedisServer, client: Client, prefix: str, measured: int = 50_000,
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
    server: RedisServer, client: Client, prefix: str, tasks: int, rounds: int = 1
) -> dict[str, Any]:
    """Requests of one no-op task each, processed by one worker process, `rounds` times on
    fresh queues. Redis's share: the CPU time of its main thread (everything it did for them)
    and, within it, the time in the engine's functions."""
    runs = []
    for r in range(rounds):
        q = Queue(client, f"one-{r}", prefix=prefix)
        for _ in range(tasks):
            q.submit([None], handler="noop")
        runs.append(run_workers(server, client, q, tasks, 1))
    return rounds_summary(runs, "one_task_requests_per_s_1_worker", "one_task_") | {
        "one_task_round_trips_per_task": round(runs[0].calls / runs[0].tasks, 4),
    }


def bench_metrics(
    server: RedisServer, client: Client, prefix: str, tasks: int, rounds: int = 2
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
    client: Client, prefix: str, batch: int, rounds: int = 101, tasks: int = 64
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
            before = read.command_stats(client).get("fcall", (0, 0))[1]
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
                    (read.command_stats(client).get("fcall", (0, 0))[1] - before) / tasks)
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


def latency_figures(samples_ns: list[Any], suffix: str = "") -> dict[str, Any]:
    samples = sorted(int(x) / 1e6 for x in samples_ns)
    return {
        f"latency_p50_ms{suffix}": round(samples[len(samples) // 2], 3),
        f"latency_p99_ms{suffix}": round(samples[int(len(samples) * 0.99)], 3),
        f"latency_max_ms{suffix}": round(samples[-1], 3),
        f"latency_samples{suffix}": len(samples),
    }


def bench_latency(
    server: RedisServer, client: Client, prefix: str, n: int = 2000, rate: float = 200.0,
    peers: bool = True,
) -> dict[str, Any]:
    """Submit -> handler start of one-task requests at a light steady rate, one worker
    process waiting; then the same for huey's consumer (one worker thread, blocking on its
    queue), on the same redis-server, so that the two p50s compare."""
    q = Queue(client, "latency", prefix=prefix)
    done = lambda: read.totals(q).get("done", 0)  # noqa: E731
    procs = start_workers(server, prefix, "latency", 1)
    try:
        q.submit([{"t": time.time_ns()}], handler="latency", request_id="warmup")
        wait_until(lambda: done() == 1, 60, "the worker to start")
        paced(n, rate, lambda i: q.submit(
            [{"t": time.time_ns()}], handler="latency", request_id=f"l{i}"))
        wait_until(lambda: done() >= n + 1, 60, "all latency samples")
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
    # Each task's sample is its result (bench/handlers.py).
    samples = [ns for i in range(n) for ns in read.all_results(q, f"l{i}").values()]
    out = latency_figures(samples) | {"latency_rate_per_s": rate}
    if HAVE_HUEY and peers:
        out |= bench_huey_latency(server, f"{prefix}:huey-latency-samples", n, rate)
    return out


def bench_flood(server: RedisServer, client: Client, prefix: str, n: int = 1500,
                tasks: int = 600_000) -> dict[str, Any]:
    """What a worker's calls cost the engine's other clients: one worker drains `tasks` no-op
    tasks (its batches at their largest) while this process submits `n` one-task requests to
    another queue, one a millisecond; the submit call's time as the producer sees it. A hot
    path change that holds Redis longer per call shows here, not in the rates."""
    q = Queue(client, "flood", prefix=prefix)
    other = Queue(client, "flood-other", prefix=prefix)
    for i in range(0, tasks, 100_000):
        q.submit([None] * min(100_000, tasks - i), handler="noop", request_id=f"f{i}")
    procs = start_workers(server, prefix, "flood", 1, "--burst")
    times: list[float] = []
    try:
        wait_until(lambda: read.totals(q).get("done", 0) >= 20_000, 60, "the flood under way")
        for i in range(n):
            started = time.perf_counter_ns()
            other.submit([{"i": i}], handler="noop")
            times.append(time.perf_counter_ns() - started)
            time.sleep(0.001)
        left = tasks - read.totals(q).get("done", 0)
    finally:
        for p in procs:
            p.kill()
            p.wait(30)
    figures = latency_figures(times, "_flood")
    return {k.replace("latency_", "submit_"): v for k, v in figures.items()} | {
        "submit_flood_tasks_left": left,  # 0: the flood ended before the samples did
    }


def bench_huey_latency(
    server: RedisServer, key: str, n: int, rate: float
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
        wait_until(lambda: huey_sample_count(huey, key) == 1, 60, "huey's consumer to start")
        huey_clear_samples(huey, key)
        paced(n, rate, lambda i: task(key, time.time_ns()))
        wait_until(lambda: huey_sample_count(huey, key) >= n, 60,
                   "all of huey's latency samples")
    finally:
        proc.terminate()
        proc.wait(30)
    huey.flush()
    return latency_figures(huey_samples(huey, key), "_huey")


def run_all(fsync: str, args: argparse.Namespace, only: set[str]) -> dict[str, Any]:
    """Every chosen measure on one fresh redis-server with appendfsync `fsync`."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="qa-bench-") as tmp:
        server = start_redis(Path(tmp), appendonly=True, fsync=fsync)
        try:
            client = connect(server.url, cluster=False)
            if "single" in only:
                results |= bench_single_submits(server, client, "b0", args.submits,
                                                peers=not args.quick)
            if "one_task" in only:
                results |= bench_one_task_requests(server, client, "b5", args.one_task,
                                                   args.rounds)
                if args.peers:
                    results |= bench_peer_workers(server, args.one_task)
            if "enqueue" in only:
                results |= bench_enqueue(client, "b1")
            if "metrics" in only:
                results |= bench_metrics(server, client, "b7", args.one_task)
            if "tracing" in only:  # issue 38: tracing off, its context carried, on
                from bench.bench_tracing import bench_tracing

                results |= bench_tracing(server, client, "b8", args.one_task)
            if "noop" in only:
                for n in args.workers:
                    results |= bench_throughput(server, client, f"b2-{n}", args.tasks, n,
                                                args.rounds)
                if 1 in args.workers:
                    results["round_trips_per_task"] = results["round_trips_per_task_1"]
            results["redis"] = read.redis_health(client).version
        finally:
            server.stop()
        if "backlog" in only:
            # Its own server too: a million tasks make hundreds of MB of append-only file.
            with tempfile.TemporaryDirectory(prefix="qa-bench-") as tmp2:
                server = start_redis(Path(tmp2), appendonly=True, fsync=fsync)
                try:
                    client = connect(server.url, cluster=False)
                    results |= bench_backlog(server, client, "b6")
                finally:
                    server.stop()
        if "flood" in only:
            with tempfile.TemporaryDirectory(prefix="qa-bench-") as tmp3:
                server = start_redis(Path(tmp3), appendonly=True, fsync=fsync)
                try:
                    results |= bench_flood(server, connect(server.url, cluster=False), "b9")
                finally:
                    server.stop()
        if "latency" in only:
            # A server of its own: on the first one, after the throughput runs had written
            # hundreds of MB to its append-only file, fsync always gave 28-34 ms p50 with
            # either engine (the disk catching up, not the hand-off) against ~1 ms here.
            server = start_redis(Path(tmp) / "latency", appendonly=True, fsync=fsync)
            try:
                client = connect(server.url, cluster=False)
                results |= bench_latency(server, client, "b4", args.latency, peers=args.peers)
                results["redis"] = read.redis_health(client).version
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
    parser.add_argument("--latency", type=int, default=2_000,
                        help="submits timed to their handler's start, at 200/s")
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
    parser.add_argument("--rounds", type=int, default=1,
                        help="no-op and one-task runs each, on fresh queues: the median rate, "
                        "its spread, the lowest CPU and commands per task")
    parser.add_argument("--workers", default="1,2",
                        help="worker processes for the no-op runs, comma-separated")
    parser.add_argument(
        "--quick", action="store_true",
        help="the check before a change to the hot path lands (under a minute): fsync "
        "everysec, small counts, no peers' workers, no backlog or metrics runs, one no-op run",
    )
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()
    # Its submits come before its workers announce their handlers, on purpose.
    warnings.filterwarnings("ignore", category=UnknownHandlerWarning)
    if args.quick:
        args.fsync, args.peers, args.workers = ["everysec"], False, "1"
        args.tasks, args.one_task, args.submits = 30_000, 6_000, 2_000
        args.rounds = max(args.rounds, 3)
        args.latency = 1_000
        if args.only == ",".join(MEASURES):
            args.only = "single,one_task,enqueue,noop,latency,flood"
    args.workers = [int(n) for n in args.workers.split(",")]
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
